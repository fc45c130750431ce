"""``import orchestrator`` in a fresh interpreter: the API's names cost nothing until used
(no Hydra, Ray or torch), and using one still brings neither Ray nor torch."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import REPO

PROBE = """
import sys
import orchestrator
heavy = ("hydra", "ray", "torch", "orchestrator.api")
print(sorted(m for m in heavy if m in sys.modules))
orchestrator.compose
print(sorted(m for m in ("ray", "torch") if m in sys.modules))
"""


def test_the_import_is_cheap_and_the_api_brings_no_ray_nor_torch() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["[]", "[]"]
