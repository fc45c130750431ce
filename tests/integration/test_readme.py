"""The README's "Try it" and "Train your own model" lines, run as written, in the README's order.

Each line runs through bash from the repository's root, the way a user pastes it after
the README's first command. The block's first line activates the venv; here the
activation is a ``python`` on PATH that is this interpreter (with this checkout
importable). A long line gets extra overrides that only shorten it (fewer steps, a
smaller search); a line added to the README without an entry here fails the test, so
the two cannot drift. The report line, written with ``<id>`` in the prose below the
block, runs with the newest run's id.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.runs import env_for, spares_off

ACTIVATE = ". .venv/bin/activate"

# Overrides appended to each line (matched by the line's text before its comment): they
# shorten a run and change nothing else it shows (nor does recovery.spares=off on a line
# that loses no worker, the rule every test run follows: tests/support/runs.py spares_off).
# Digits' kill_region fires at step 60,
# kill_worker at 300 and spot_storm's last preemption at 340: those runs keep enough
# steps to reach them.
SHORTER: dict[str, str] = {
    "python -m orchestrator job=digits": "job.steps=20",
    "python -m orchestrator job=digits chaos.faults=[{kind:kill_region,at_step:60}]": "job.steps=70",
    "python -m orchestrator job=digits chaos.faults=[{kind:kill_worker,at_step:300}]": "job.steps=310",
    "python -m orchestrator job=digits chaos=region_outage recovery=warm_standby": "job.steps=70",
    "python -m orchestrator job=digits chaos=spot_storm": "job.steps=350",
    "python -m orchestrator job=digits_hpo": "hpo.num_samples=2 hpo.max_t=2 hpo.steps_per_iteration=5",
    "python -m orchestrator job=gpt": "job.steps=4",
    "python -m orchestrator action=list": "",
    "PYTHONPATH=examples/seqproj python -m orchestrator job.workload=seqmodels.classifier:SeqClassifier"
    " job.params.hidden=32": "job.steps=20",
    "PYTHONPATH=examples/seqproj python -m orchestrator job.train_func=seqmodels.raytrain:train_func"
    " job.steps=5": "job.params.train_size=512",
    "PYTHONPATH=examples/seqproj python -m orchestrator --config-dir examples/seqproj/conf job=seq": "job.steps=20",
}
REPORT = "python -m orchestrator action=report run_id=<id>"


def block_after(text: str, heading: str) -> list[str]:
    """The lines of the first code block under ``heading``."""
    section = text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.split("```")[1].strip().splitlines() if line.strip()]


def key_of(line: str) -> str:
    """The line as the shell splits it, without its comment: ``SHORTER``'s key."""
    return " ".join(shlex.split(line, comments=True))


def readme_lines() -> tuple[list[str], str]:
    text = (REPO / "README.md").read_text()
    tried = block_after(text, "## Try it")
    assert tried[0].split("#")[0].strip() == ACTIVATE, "the Try it block must start by activating the venv"
    own = block_after(text, "## Train your own model")
    assert f"`{REPORT}`" in text.split("## Try it", 1)[1].split("\n## ", 1)[0]
    return tried[1:] + own, text


def activated_path(bin_dir: Path) -> dict[str, str]:
    """What ``. .venv/bin/activate`` does for these lines: ``python`` is this interpreter,
    and this checkout's packages win whatever PYTHONPATH a line sets."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "python"
    wrapper.write_text(
        f'#!/bin/sh\nexport PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{REPO}"\nexec {shlex.quote(sys.executable)} "$@"\n'
    )
    wrapper.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def bash(line: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_every_line_has_its_shortening() -> None:
    lines, _ = readme_lines()
    assert sorted(key_of(line) for line in lines) == sorted(SHORTER), "a README line without its entry in SHORTER"


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of the user's shell after the block's first line: one home for every line."""
    tmp = tmp_path_factory.mktemp("readme")
    env = env_for(tmp / "home", activated_path(tmp / "bin"))
    env.pop("PYTHONPATH", None)
    return env


# One test per line, in the README's order (a run per line: each gets its own time limit).
@pytest.mark.timeout(420)
@pytest.mark.parametrize("line", readme_lines()[0], ids=lambda line: key_of(line)[:60])
def test_the_readme_line_runs_as_written(line: str, shell: dict[str, str]) -> None:
    key = key_of(line)
    command = " ".join([line.split(" #", 1)[0].rstrip(), SHORTER[key], *spares_off(tuple(key.split()))]).rstrip()
    proc = bash(command, shell, timeout=400)
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, f"{command}\n{proc.stderr[-3000:]}"


def test_the_report_line_runs_with_an_id_from_the_list(shell: dict[str, str]) -> None:
    listed = json.loads(bash("python -m orchestrator action=list format=json", shell, timeout=60).stdout)
    assert listed, "the lines above made no run"
    proc = bash(REPORT.replace("<id>", listed[0]["run_id"]), shell, timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert re.search(r"incident report: run \S+", proc.stdout), proc.stdout


pytestmark = pytest.mark.integration
