"""The checks of chaos.faults (orchestrator.config.validate_chaos): their number and durations."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.checks import MAX_FAULTS
from orchestrator.config.schema import FaultConfig
from orchestrator.config.validate_chaos import validate_chaos
from orchestrator.errors import ConfigError
from orchestrator.wire.faults import FaultKind
from tests.unit.orchestrator.config.test_validate import config

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def cfg():  # type: ignore[no-untyped-def]
    from orchestrator.config.compose import compose

    return compose(["home=/tmp/orchestrator-validate-chaos"])


def test_more_faults_than_a_drill_holds_are_refused(cfg) -> None:  # type: ignore[no-untyped-def]
    cfg.chaos.faults = [FaultConfig(kind=FaultKind("preempt"), at_step=5) for _ in range(MAX_FAULTS + 1)]
    with pytest.raises(ConfigError, match=f"at most {MAX_FAULTS}"):
        validate_chaos(cfg)


@pytest.mark.parametrize(
    ("field", "value"),
    [("after_s", 1e-300), ("grace_s", 1e-300), ("duration_s", 1e-300), ("latency_ms", 1e-300), ("bandwidth_kbps", -1)],
)
def test_a_fault_duration_that_is_no_duration_is_refused(cfg, field: str, value: float) -> None:  # type: ignore[no-untyped-def]
    fault = FaultConfig(kind=FaultKind("preempt"), at_step=None if field == "after_s" else 5)
    setattr(fault, field, value)
    cfg.chaos.faults = [fault]
    with pytest.raises(ConfigError) as err:
        validate_chaos(cfg)
    assert err.value.key == f"chaos.faults[0].{field}"


def _faults(tmp_path: Path, *faults: FaultConfig, hpo: bool = False):  # type: ignore[no-untyped-def]
    cfg = config(tmp_path)
    cfg = replace(cfg, chaos=replace(cfg.chaos, faults=list(faults)))
    return replace(cfg, hpo=replace(cfg.hpo, enabled=True)) if hpo else cfg


def test_a_fault_with_one_trigger_in_a_candidate_region_passes(tmp_path: Path) -> None:
    validate_chaos(_faults(tmp_path, FaultConfig(kind=FaultKind.kill_region, at_step=20, region="b")))
    validate_chaos(
        _faults(tmp_path, FaultConfig(kind=FaultKind.kill_region, during="checkpoint_upload", graceful=True))
    )


@pytest.mark.parametrize(
    ("fault", "key", "words"),
    [
        (FaultConfig(kind=FaultKind.kill_region, at_step=20, region="zz"), "chaos.faults[0].region", "allowed: a, b"),
        (FaultConfig(kind=FaultKind.kill_region), "chaos.faults[0]", "trigger"),
        (
            FaultConfig(kind=FaultKind.preempt, at_step=20, graceful=True),
            "chaos.faults[0].graceful",
            "only kill_region is cancelled with a grace period",
        ),
        (FaultConfig(kind=FaultKind.kill_region, at_step=20, after_s=5.0), "chaos.faults[0]", "trigger"),
    ],
)
def test_each_refusal_names_its_key(tmp_path: Path, fault: FaultConfig, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_chaos(_faults(tmp_path, fault))
    assert err.value.key.startswith(key) and words in str(err.value), str(err.value)


@pytest.mark.parametrize(
    ("fault", "store", "key", "words"),
    [
        (
            FaultConfig(kind=FaultKind.controller_host_loss, at_step=20),
            None,
            "chaos.faults[0].kind",
            "cloud.control_store",
        ),
        (
            FaultConfig(kind=FaultKind.controller_freeze, at_step=20, duration_s=30),
            None,
            "chaos.faults[0].kind",
            "survived by a takeover",
        ),
        (FaultConfig(kind=FaultKind.controller_freeze, at_step=20), "file:///c", "chaos.faults[0].duration_s", "> 0"),
    ],
)
def test_a_takeover_drill_needs_a_control_store_and_a_freeze_a_duration(
    tmp_path: Path, fault: FaultConfig, store: str | None, key: str, words: str
) -> None:
    cfg = _faults(tmp_path, fault)
    cfg = replace(cfg, cloud=replace(cfg.cloud, control_store=store))
    with pytest.raises(ConfigError) as err:
        validate_chaos(cfg)
    assert err.value.key == key and words in str(err.value), str(err.value)
    fault.duration_s = 30
    validate_chaos(replace(cfg, cloud=replace(cfg.cloud, control_store="file:///c")))
