"""Typed configuration: the schemas Hydra validates against, and the checks it cannot do.

Hydra's DictConfig is converted to these dataclasses once, at the entry point;
nothing below the entry point sees a DictConfig.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from recovery.storage import SECRET_OPTIONS

ACTIONS = ("run", "status")
STORAGE_FAULTS = ("storage_outage", "storage_hang", "storage_slow", "torn_checkpoint")
FAULT_KINDS = (
    "kill_region",
    "kill_worker",
    "hang_region",
    "partition_region",
    "corrupt_checkpoint",
    "user_error",
    *STORAGE_FAULTS,
)


class ConfigError(Exception):
    """A value a user gave is not allowed. Carries the key so the message names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


@dataclass
class JobConfig:
    name: str = MISSING
    workload: str = MISSING
    steps: int = 300
    seed: int = 0
    batch_size: int = 64
    lr: float = 0.01
    hidden_size: int = 256
    eval_fraction: float = 0.25


@dataclass
class TrainerConfig:
    workers: int = 2
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    # Ray Train restarts the worker group in place this many times (FailureConfig).
    max_worker_restarts: int = 3


@dataclass
class CheckpointConfig:
    interval_steps: int = 20
    keep_last: int = 3
    # Upload in the background while training goes on (false: training waits for each commit).
    async_upload: bool = True


@dataclass
class RegionConfig:
    store: str = MISSING
    num_cpus: int = 2
    # fsspec options for the store (endpoint_url, config_kwargs, requests_timeout,
    # op_timeout_s...). Never credentials: those come from the environment.
    storage_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class CloudConfig:
    name: str = MISSING
    provider: str = MISSING
    regions: dict[str, RegionConfig] = field(default_factory=dict)
    # Ordered failover preference; empty means every region, in mapping order.
    candidates: list[str] = field(default_factory=list)


@dataclass
class RecoveryConfig:
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 10.0
    max_failovers: int = 2
    max_restarts_on_errors: int = 1
    provision_timeout_s: float = 60.0
    # A region that failed within this many seconds is skipped when choosing the next.
    region_cooldown_s: float = 600.0
    # Keep the next region's cluster up with the runtime waiting (faster failover, twice the clusters).
    standby: bool = False
    # A store that fails this long makes the runtime commit to the next region's store.
    store_outage_s: float = 15.0


@dataclass
class FaultConfig:
    kind: str = MISSING
    at_step: int = MISSING
    # Storage faults: whose store (default: the region running at that step), for how
    # long (0: to the end of the run), and for storage_slow / torn_checkpoint the shape.
    region: str | None = None
    duration_s: float = 0.0
    latency_ms: float = 0.0
    bandwidth_kbps: float = 0.0


@dataclass
class ChaosConfig:
    faults: list[FaultConfig] = field(default_factory=list)


@dataclass
class Config:
    job: JobConfig = field(default_factory=JobConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    cloud: CloudConfig = field(default_factory=CloudConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    chaos: ChaosConfig = field(default_factory=ChaosConfig)
    action: str = "run"
    run_id: str | None = None
    home: str = "~/.orchestrator"
    # Print a live progress line while the run goes on.
    progress: bool = True

    @property
    def home_path(self) -> str:
        return os.path.abspath(os.path.expanduser(self.home))

    def candidate_regions(self) -> list[str]:
        return list(self.cloud.candidates) or list(self.cloud.regions)


def validate(cfg: Config) -> Config:
    """Checks the schema cannot express. Raises ConfigError naming the first bad key."""
    if cfg.action not in ACTIONS:
        raise ConfigError("action", f"got {cfg.action!r}; allowed: {', '.join(ACTIONS)}")
    if cfg.action == "status":
        if not cfg.run_id:
            raise ConfigError("run_id", "action=status needs the run to show; add run_id=<id>")
        return cfg
    _positive_int("job.steps", cfg.job.steps)
    _positive_int("job.batch_size", cfg.job.batch_size)
    _positive_int("job.hidden_size", cfg.job.hidden_size)
    if not 0.0 < cfg.job.lr:
        raise ConfigError("job.lr", f"got {cfg.job.lr}; expected a number > 0")
    if not 0.0 < cfg.job.eval_fraction < 1.0:
        raise ConfigError("job.eval_fraction", f"got {cfg.job.eval_fraction}; expected 0 < x < 1")
    _positive_int("trainer.workers", cfg.trainer.workers)
    if cfg.trainer.cpus_per_worker <= 0:
        raise ConfigError("trainer.cpus_per_worker", f"got {cfg.trainer.cpus_per_worker}; expected a number > 0")
    if cfg.trainer.gpus_per_worker < 0:
        raise ConfigError("trainer.gpus_per_worker", f"got {cfg.trainer.gpus_per_worker}; expected >= 0")
    _non_negative_int("trainer.max_worker_restarts", cfg.trainer.max_worker_restarts)
    _positive_int("checkpoint.interval_steps", cfg.checkpoint.interval_steps)
    if cfg.checkpoint.keep_last < 2:
        raise ConfigError(
            "checkpoint.keep_last",
            f"got {cfg.checkpoint.keep_last}; expected >= 2 so a corrupt newest checkpoint "
            "still leaves one to fall back to",
        )
    _validate_cloud(cfg)
    _validate_recovery(cfg.recovery)
    _validate_chaos(cfg)
    if cfg.run_id is not None and not _safe_name(cfg.run_id):
        raise ConfigError("run_id", f"got {cfg.run_id!r}; allowed: letters, digits, '-', '_' and '.'")
    return cfg


def _validate_cloud(cfg: Config) -> None:
    cloud = cfg.cloud
    if not cloud.regions:
        raise ConfigError("cloud.regions", f"cloud {cloud.name!r} defines no region")
    for name, region in cloud.regions.items():
        if not _safe_name(name):
            raise ConfigError(f"cloud.regions.{name}", "region names may hold letters, digits, '-', '_', '.'")
        if "://" not in region.store:
            raise ConfigError(
                f"cloud.regions.{name}.store",
                f"got {region.store!r}; expected an fsspec URL such as file:///path or s3://bucket/prefix",
            )
        _positive_int(f"cloud.regions.{name}.num_cpus", region.num_cpus)
        for opt, value in region.storage_options.items():
            # token=anon (no credentials, for emulators) is the one safe value.
            if opt.lower() in SECRET_OPTIONS and value != "anon":
                raise ConfigError(
                    f"cloud.regions.{name}.storage_options.{opt}",
                    "credentials do not belong in a config (it is written to disk); use the "
                    "standard chains: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile for s3://, "
                    "GOOGLE_APPLICATION_CREDENTIALS for gs://",
                )
    seen: set[str] = set()
    for name in cloud.candidates:
        if name not in cloud.regions:
            raise ConfigError(
                "cloud.candidates",
                f"{name!r} is not a region of cloud {cloud.name!r}; allowed: {', '.join(cloud.regions)}",
            )
        if name in seen:
            raise ConfigError("cloud.candidates", f"{name!r} is listed twice")
        seen.add(name)
    need = cfg.trainer.workers * cfg.trainer.cpus_per_worker
    for name in cfg.candidate_regions():
        have = cloud.regions[name].num_cpus
        if need > have:
            raise ConfigError(
                "trainer.workers",
                f"{cfg.trainer.workers} workers x {cfg.trainer.cpus_per_worker} CPUs need {need:g} "
                f"CPUs but region {name!r} has {have}; lower trainer.workers or "
                "trainer.cpus_per_worker, or raise cloud.regions.<name>.num_cpus",
            )


def _validate_recovery(rec: RecoveryConfig) -> None:
    if rec.heartbeat_interval_s <= 0:
        raise ConfigError("recovery.heartbeat_interval_s", f"got {rec.heartbeat_interval_s}; expected > 0")
    if rec.heartbeat_timeout_s < 2 * rec.heartbeat_interval_s:
        raise ConfigError(
            "recovery.heartbeat_timeout_s",
            f"got {rec.heartbeat_timeout_s}; expected at least twice "
            f"recovery.heartbeat_interval_s ({rec.heartbeat_interval_s})",
        )
    _non_negative_int("recovery.max_failovers", rec.max_failovers)
    _non_negative_int("recovery.max_restarts_on_errors", rec.max_restarts_on_errors)
    if rec.provision_timeout_s <= 0:
        raise ConfigError("recovery.provision_timeout_s", f"got {rec.provision_timeout_s}; expected > 0")
    if rec.store_outage_s <= 0:
        raise ConfigError("recovery.store_outage_s", f"got {rec.store_outage_s}; expected > 0")
    if rec.region_cooldown_s < 0:
        raise ConfigError("recovery.region_cooldown_s", f"got {rec.region_cooldown_s}; expected >= 0")


def _validate_chaos(cfg: Config) -> None:
    for i, fault in enumerate(cfg.chaos.faults):
        if fault.kind not in FAULT_KINDS:
            raise ConfigError(
                f"chaos.faults[{i}].kind",
                f"got {fault.kind!r}; allowed: {', '.join(FAULT_KINDS)}",
            )
        if fault.region is not None and fault.region not in cfg.candidate_regions():
            raise ConfigError(
                f"chaos.faults[{i}].region",
                f"got {fault.region!r}; allowed: {', '.join(cfg.candidate_regions())}",
            )
        if fault.duration_s < 0:
            raise ConfigError(f"chaos.faults[{i}].duration_s", f"got {fault.duration_s}; expected >= 0")
        if fault.kind in STORAGE_FAULTS:
            regions = [fault.region] if fault.region else cfg.candidate_regions()
            for r in regions:
                if proxy_target(cfg.cloud.regions[r]) is None:
                    raise ConfigError(
                        f"chaos.faults[{i}].kind",
                        f"{fault.kind} needs region {r!r} to keep its store behind a plain-http endpoint "
                        f"(s3:// or gs:// with storage_options.endpoint_url), e.g. cloud=local_cloudstores",
                    )
        if fault.kind == "storage_slow" and fault.bandwidth_kbps <= 0 and fault.latency_ms <= 0:
            raise ConfigError(
                f"chaos.faults[{i}].bandwidth_kbps", "storage_slow needs bandwidth_kbps > 0 or latency_ms > 0"
            )
        if not 1 <= fault.at_step <= cfg.job.steps:
            raise ConfigError(
                f"chaos.faults[{i}].at_step",
                f"got {fault.at_step}; expected a step in 1..{cfg.job.steps} (job.steps)",
            )


def proxy_target(region: RegionConfig) -> tuple[str, int] | None:
    """(host, port) of a store's plain-http endpoint, which a fault proxy can stand in front of."""
    from urllib.parse import urlparse

    if not region.store.startswith(("s3://", "gs://", "gcs://")):
        return None
    endpoint = region.storage_options.get("endpoint_url")
    if not endpoint:
        return None
    url = urlparse(str(endpoint))
    if url.scheme != "http" or not url.hostname:
        return None
    return url.hostname, url.port or 80


def _positive_int(key: str, value: int) -> None:
    if value < 1:
        raise ConfigError(key, f"got {value}; expected an integer >= 1")


def _non_negative_int(key: str, value: int) -> None:
    if value < 0:
        raise ConfigError(key, f"got {value}; expected an integer >= 0")


def _safe_name(name: str) -> bool:
    return bool(name) and all(c.isalnum() or c in "-_." for c in name) and name not in (".", "..")


def to_plain(obj: Any) -> Any:
    """A dataclass tree as JSON-able dicts (for specs and the journal)."""
    from dataclasses import asdict, is_dataclass

    return asdict(obj) if is_dataclass(obj) else obj
