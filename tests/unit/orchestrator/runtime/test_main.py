"""The runtime's entry point (python -m orchestrator.runtime): a malformed spec is an infra failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config.compose import compose
from recovery.detection import EXIT_INFRA
from tests.unit.orchestrator.wire.test_sections import spec_of

pytestmark = pytest.mark.unit


def test_the_runtime_exits_as_an_infra_failure_on_a_malformed_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.runtime.__main__ import main

    plain = spec_of(compose(["job=digits"])).to_plain()
    plain["trainer"]["workers"] = "two"
    (tmp_path / "spec.json").write_text(json.dumps(plain))
    assert main([str(tmp_path / "spec.json")]) == EXIT_INFRA
    err = capsys.readouterr().err
    assert err == "orchestrator.runtime: runtime spec: trainer.workers: got 'two'; expected an integer\n"
