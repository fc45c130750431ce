"""chaos.* checks: a fault's region among the candidates, what a search may take, triggers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.schema import FaultConfig
from orchestrator.config.validate_chaos import validate_chaos
from orchestrator.errors import ConfigError
from orchestrator.wire.faults import FaultKind
from tests.unit.orchestrator.config.test_validate import config

pytestmark = pytest.mark.unit


def _faults(tmp_path: Path, *faults: FaultConfig, hpo: bool = False):  # type: ignore[no-untyped-def]
    cfg = config(tmp_path)
    cfg = replace(cfg, chaos=replace(cfg.chaos, faults=list(faults)))
    return replace(cfg, hpo=replace(cfg.hpo, enabled=True)) if hpo else cfg


def test_a_fault_with_one_trigger_in_a_candidate_region_passes(tmp_path: Path) -> None:
    validate_chaos(_faults(tmp_path, FaultConfig(kind=FaultKind.kill_region, at_step=20, region="b")))


@pytest.mark.parametrize(
    ("fault", "key", "words"),
    [
        (FaultConfig(kind=FaultKind.kill_region, at_step=20, region="zz"), "chaos.faults[0].region", "allowed: a, b"),
        (FaultConfig(kind=FaultKind.kill_region), "chaos.faults[0]", "trigger"),
        (FaultConfig(kind=FaultKind.kill_region, at_step=20, after_s=5.0), "chaos.faults[0]", "trigger"),
    ],
)
def test_each_refusal_names_its_key(tmp_path: Path, fault: FaultConfig, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_chaos(_faults(tmp_path, fault))
    assert err.value.key.startswith(key) and words in str(err.value), str(err.value)
