"""validate: the checks the schema cannot express, each refusal one line naming its key."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.config.checks import MAX_RUN_ID, MAX_STEPS
from orchestrator.config.schema import (
    Action,
    Autocast,
    CloudConfig,
    Config,
    FaultConfig,
    FsdpConfig,
    JobConfig,
    OutputFormat,
    Precision,
    ProviderKind,
    RegionConfig,
    Strategy,
)
from orchestrator.config.validate import check_bounds, validate, validate_logs_keys
from orchestrator.errors import ConfigError
from orchestrator.wire.faults import FaultKind
from recovery.boundedjson import INT64

pytestmark = pytest.mark.unit


def config(tmp_path: Path, **changes: object) -> Config:
    cfg = Config(
        job=JobConfig(name="job", workload="digits"),
        cloud=CloudConfig(
            name="test",
            provider=ProviderKind.local,
            regions={
                "a": RegionConfig(store=f"file://{tmp_path}/a"),
                "b": RegionConfig(store=f"file://{tmp_path}/b"),
            },
        ),
        home=str(tmp_path / "home"),
    )
    return replace(cfg, **changes)  # type: ignore[arg-type]


def fsdp(cfg: Config, **changes: object) -> Config:
    """cfg with trainer.strategy=fsdp, and the trainer's (fsdp=, autocast=) or the config's other changes."""
    trainer = {k: v for k, v in changes.items() if k in ("fsdp", "autocast")}
    rest = {k: v for k, v in changes.items() if k not in trainer}
    return replace(cfg, trainer=replace(cfg.trainer, strategy=Strategy.fsdp, **trainer), **rest)  # type: ignore[arg-type]


def test_fsdp_with_mixed_precision_on_gpus_passes(tmp_path: Path) -> None:
    cfg = fsdp(config(tmp_path), fsdp=FsdpConfig(param_dtype=Precision.bf16, reduce_dtype=Precision.fp32))
    cfg = replace(cfg, trainer=replace(cfg.trainer, gpus_per_worker=1.0))
    cfg = replace(
        cfg, cloud=replace(cfg.cloud, regions={n: replace(r, num_gpus=1) for n, r in cfg.cloud.regions.items()})
    )
    assert validate(cfg) is cfg


def refused(cfg: Config) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert "\n" not in str(err.value)
    return err.value


def test_a_sound_config_passes_and_is_returned(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    assert validate(cfg) is cfg


@pytest.mark.parametrize(
    ("change", "key"),
    [
        (lambda c: replace(c, job=replace(c.job, steps=0)), "job.steps"),
        (lambda c: replace(c, job=replace(c.job, steps=MAX_STEPS + 1)), "job.steps"),
        (lambda c: replace(c, job=replace(c.job, name="../x")), "job.name"),
        (lambda c: replace(c, job=replace(c.job, lr=float("nan"))), "job.lr"),
        (lambda c: replace(c, job=replace(c.job, train_func="m:f")), "job.workload"),
        (lambda c: replace(c, trainer=replace(c.trainer, min_workers=5)), "trainer.min_workers"),
        (lambda c: replace(c, checkpoint=replace(c.checkpoint, keep_last=1)), "checkpoint.keep_last"),
        (lambda c: replace(c, run_id="a" * (MAX_RUN_ID + 1)), "run_id"),
        (lambda c: replace(c, home=""), "home"),
        (lambda c: replace(c, format=OutputFormat.json), "format"),
        (lambda c: replace(c, recovery=replace(c.recovery, heartbeat_timeout_s=0.5)), "recovery.heartbeat_timeout_s"),
        (lambda c: replace(c, recovery=replace(c.recovery, controller_lease_s=1.0)), "recovery.controller_lease_s"),
        (lambda c: replace(c, cloud=replace(c.cloud, candidates=["z"])), "cloud.candidates"),
        (lambda c: replace(c, cloud=replace(c.cloud, regions={})), "cloud.regions"),
        (
            lambda c: replace(c, cloud=replace(c.cloud, regions={"a": RegionConfig(store="memory://x")})),
            "cloud.regions.a.store",
        ),
        (
            lambda c: replace(c, chaos=replace(c.chaos, faults=[FaultConfig(kind=FaultKind("kill_region"))])),
            "chaos.faults[0]",
        ),
        (lambda c: replace(c, notify=replace(c.notify, timeout_s=0.0)), "notify.timeout_s"),
        (lambda c: fsdp(c, hpo=replace(c.hpo, enabled=True)), "trainer.strategy"),
        (lambda c: fsdp(c, job=replace(c.job, workload="", train_func="m:f")), "trainer.strategy"),
        (lambda c: fsdp(c, autocast=Autocast.fp16), "trainer.autocast"),
        (lambda c: fsdp(c, fsdp=FsdpConfig(param_dtype=Precision.bf16)), "trainer.fsdp.param_dtype"),
        (lambda c: fsdp(c, fsdp=FsdpConfig(reduce_dtype=Precision.fp32)), "trainer.fsdp.reduce_dtype"),
        (
            lambda c: replace(c, trainer=replace(c.trainer, fsdp=FsdpConfig(param_dtype=Precision.bf16))),
            "trainer.fsdp.param_dtype",
        ),
    ],
)
def test_each_refusal_names_its_key(tmp_path: Path, change: object, key: str) -> None:
    err = refused(change(config(tmp_path)))  # type: ignore[operator]
    assert err.key == key, str(err)


def test_read_only_actions_check_only_what_they_read(tmp_path: Path) -> None:
    bad_job = replace(config(tmp_path), job=JobConfig(name="../x", workload="digits", steps=0))
    assert validate(replace(bad_job, action=Action.status, run_id="r1")).action is Action.status
    assert refused(replace(bad_job, action=Action.status)).key == "run_id"
    assert refused(replace(bad_job, action=Action.list, run_id="r1")).key == "run_id"


def test_logs_keys_belong_to_their_actions(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^attempt: only action=logs"):
        validate_logs_keys(replace(config(tmp_path), attempt=1))
    with pytest.raises(ConfigError, match=r"^show_logs:"):
        validate_logs_keys(replace(config(tmp_path), action=Action.status, show_logs=True))
    with pytest.raises(ConfigError, match=r"^rank:"):
        validate_logs_keys(replace(config(tmp_path), action=Action.logs, rank="x"))
    validate_logs_keys(replace(config(tmp_path), action=Action.logs, rank="driver", attempt=2, follow=True))
    with pytest.raises(ConfigError, match=r"^detach: .*action=watch runs none"):
        validate_logs_keys(replace(config(tmp_path), action=Action.watch, run_id="r1", detach=True))
    validate_logs_keys(replace(config(tmp_path), action=Action.resume, run_id="r1", detach=True))


def test_bounds_hold_in_every_field_at_any_depth(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    check_bounds(cfg)
    with pytest.raises(ConfigError, match=r"^job\.seed: .*within int64"):
        check_bounds(replace(cfg, job=replace(cfg.job, seed=INT64[1] + 1)))
    with pytest.raises(ConfigError, match=r"^cloud\.regions\.b\.num_cpus:"):
        regions = {**cfg.cloud.regions, "b": RegionConfig(store="file:///b", num_cpus=2**64)}
        check_bounds(replace(cfg, cloud=replace(cfg.cloud, regions=regions)))
    with pytest.raises(ConfigError, match=r"^chaos\.faults\[0\]\.after_s: got inf"):
        fault = FaultConfig(kind=FaultKind("kill_region"), after_s=float("inf"))
        check_bounds(replace(cfg, chaos=replace(cfg.chaos, faults=[fault])))


def function(tmp_path: Path, *faults: FaultConfig, clock: str = "") -> Config:
    cfg = config(tmp_path)
    job = replace(cfg.job, workload="", train_func="m:f", clock=clock)
    return replace(cfg, job=job, chaos=replace(cfg.chaos, faults=list(faults)))


def test_a_train_function_takes_faults_on_its_reports_and_a_metric_clock(tmp_path: Path) -> None:
    faults = [
        FaultConfig(kind=FaultKind.kill_worker, at_step=3),
        FaultConfig(kind=FaultKind.user_error, at_step=5),
        FaultConfig(kind=FaultKind.kill_region, at_step=2),
    ]
    cfg = function(tmp_path, *faults, clock="epoch")
    assert validate(cfg) is cfg


def test_a_train_function_refuses_what_only_the_built_in_loop_holds_and_a_clock_it_cannot_read(
    tmp_path: Path,
) -> None:
    err = refused(function(tmp_path, FaultConfig(kind=FaultKind.corrupt_peer_state, at_step=3)))
    assert err.key == "chaos.faults[0].kind" and "corrupt_checkpoint" in str(err)
    assert refused(function(tmp_path, clock="epoch count")).key == "job.clock"
    workload = config(tmp_path)
    assert refused(replace(workload, job=replace(workload.job, clock="epoch"))).key == "job.clock"
