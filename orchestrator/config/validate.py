"""The checks the schema cannot express, run on a composed (or saved) config.

``validate`` raises ConfigError naming the first bad key; the checks of cloud.*, chaos.*
and notify.* are in ``validate_cloud``, ``validate_chaos`` and ``notify_targets``.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import fields, is_dataclass
from typing import Any

from orchestrator.config.checks import (
    MAX_BATCH_SIZE,
    MAX_HIDDEN_SIZE,
    MAX_JOB_NAME,
    MAX_RUN_ID,
    MAX_STEPS,
    MIN_CPUS,
    MIN_GPUS,
    NAME_RULE,
    at_least,
    bounded_int,
    local_path,
    non_negative_int,
    positive_int,
    safe_name,
    seconds,
)
from orchestrator.config.notify_targets import validate_notify
from orchestrator.config.schema import (
    ONE_RUN_ACTIONS,
    READ_ONLY_ACTIONS,
    RUNNING_ACTIONS,
    Action,
    Config,
    ConsoleConfig,
    DataConfig,
    OutputFormat,
    RecoveryConfig,
)
from orchestrator.config.validate_chaos import validate_chaos
from orchestrator.config.validate_cloud import _validate_options, _validate_url, validate_cloud
from orchestrator.config.validate_search import validate_search
from orchestrator.config.validate_tracking import validate_tracking
from orchestrator.errors import ConfigError
from orchestrator.wire.codec import show
from orchestrator.wire.faults import DRILL_FAULTS
from orchestrator.wire.sections import MAX_SEED
from recovery.boundedjson import INT64
from recovery.controlkey import parse_source


def validate(cfg: Config) -> Config:
    """Checks the schema cannot express. Raises ConfigError naming the first bad key.

    Every action gets the checks of what it reads or writes (bounds, home, run_id);
    run, plan and resume get all of them, before anything is written or launched
    (and the provider's checks of its regions: providers.registry.check_regions)."""
    check_bounds(cfg)
    _validate_home(cfg.home)
    if cfg.run_id is not None:
        _validate_name("run_id", cfg.run_id, MAX_RUN_ID)
    if cfg.action in ONE_RUN_ACTIONS and not cfg.run_id:
        raise ConfigError("run_id", f"action={cfg.action} needs the run; add run_id=<id>")
    if cfg.action is Action.list and cfg.run_id is not None:
        raise ConfigError(
            "run_id", "action=list shows every run under home; drop run_id, or use action=status run_id=<id>"
        )
    if cfg.format is not OutputFormat.table and cfg.action is not Action.list:
        value = cfg.format.value
        raise ConfigError("format", f"got {value!r}; only action=list takes it: drop format={value}")
    validate_logs_keys(cfg)
    validate_console(cfg)
    if cfg.action in STORE_READING_ACTIONS and cfg.cloud.control_store is not None:
        validate_store_reading(cfg)
    if cfg.action in READ_ONLY_ACTIONS:
        return cfg
    _validate_name("job.name", cfg.job.name, MAX_JOB_NAME)
    validate_training(cfg)
    positive_int("checkpoint.interval_steps", cfg.checkpoint.interval_steps)
    if cfg.checkpoint.keep_last < 2:
        raise ConfigError(
            "checkpoint.keep_last",
            f"got {cfg.checkpoint.keep_last}; expected >= 2 so a corrupt newest checkpoint "
            "still leaves one to fall back to",
        )
    validate_cloud(cfg)
    _validate_recovery(cfg.recovery)
    if cfg.recovery.standby_pool is not None and not cfg.cloud.control_store:
        raise ConfigError(
            "recovery.standby_pool",
            "needs cloud.control_store: the pool's runs share its standbys through it "
            "(e.g. cloud.control_store=s3://bucket/control, the same for every run of the pool)",
        )
    validate_search(cfg, validate_training)
    validate_chaos(cfg)
    validate_notify(cfg.notify)
    validate_tracking(cfg)
    return cfg


# A host to bind: a name or an IPv4/IPv6 address, as a resolver takes it (no scheme, no port, no path).
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[?[0-9A-Fa-f:.]{2,45}\]?")


def validate_console(cfg: Config) -> None:
    """console.* belong to action=console, which takes no run_id (it shows every run under
    home): a port 0..65535 (0: a free one) and a host to bind."""
    if cfg.console != ConsoleConfig() and cfg.action is not Action.console:
        raise ConfigError("console", "only action=console takes console.*: drop them, or add action=console")
    if cfg.action is not Action.console:
        return
    if cfg.run_id is not None:
        raise ConfigError("run_id", "action=console shows every run under home; drop run_id (its page is a click away)")
    bounded_int("console.port", cfg.console.port, 0, 65535)
    host = cfg.console.host
    if not _HOST.fullmatch(host):
        raise ConfigError(
            "console.host",
            f"got {show(host)}; expected a host name or an address to bind (127.0.0.1, ::1, 0.0.0.0, a name), "
            "without a scheme or a port (console.port sets that)",
        )


# Actions that read the control store's runs too when cloud.control_store is given (the console too)
# (orchestrator/commands/remote.py): they get the checks of what they read there.
STORE_READING_ACTIONS = (Action.list, Action.status, Action.report, Action.console)


def validate_store_reading(cfg: Config) -> None:
    """cloud.control_store, its options and cloud.control_key, checked as a run's are: a
    list, status or report reads the store's mirrors with them."""
    cloud = cfg.cloud
    if cloud.control_store is not None:
        _validate_url("cloud.control_store", cloud.control_store, "s3://bucket/control (the runs' control store)")
    _validate_options("cloud.control_options", cloud.control_options)
    try:
        parse_source(cloud.control_key)
    except ValueError as exc:
        raise ConfigError("cloud.control_key", str(exc)) from None


def validate_logs_keys(cfg: Config) -> None:
    """attempt, rank and follow belong to action=logs; show_logs to a run (or resume)."""
    if cfg.junit is not None:
        if cfg.action is not Action.report:
            raise ConfigError("junit", "only action=report takes it: add action=report run_id=<id>")
        local_path("junit", cfg.junit, "junit")
    for key, value in (("fault", cfg.fault), ("region", cfg.region)):
        if value is not None and cfg.action is not Action.drill:
            raise ConfigError(key, f"only action=drill takes it: drop {key}=..., or add action=drill run_id=<id>")
    if cfg.action is Action.drill and cfg.fault not in DRILL_FAULTS:
        raise ConfigError(
            "fault",
            f"got {show(cfg.fault)}; action=drill injects one of: {', '.join(DRILL_FAULTS)} (e.g. fault=kill_region)",
        )
    given = {"attempt": cfg.attempt is not None, "rank": cfg.rank is not None, "follow": cfg.follow}
    for key, is_given in given.items():
        if is_given and cfg.action is not Action.logs:
            raise ConfigError(key, f"only action=logs takes it: drop {key}=..., or add action=logs run_id=<id>")
    if cfg.show_logs and cfg.action not in RUNNING_ACTIONS:
        raise ConfigError(
            "show_logs", f"prints a running job's output; action={cfg.action} runs none: use action=logs run_id=<id>"
        )
    if cfg.detach and cfg.action not in RUNNING_ACTIONS:
        raise ConfigError(
            "detach", f"starts a run's controller in the background; action={cfg.action} runs none: drop detach=true"
        )
    if cfg.attempt is not None and not 1 <= cfg.attempt <= INT64[1]:
        raise ConfigError("attempt", f"got {show(cfg.attempt)}; expected an attempt number >= 1 (see action=status)")
    if cfg.rank is not None and not (cfg.rank == "driver" or re.fullmatch(r"0|[1-9][0-9]{0,5}", cfg.rank)):
        raise ConfigError("rank", f"got {show(cfg.rank)}; expected a rank number (0, 1, ...) or driver")


def check_bounds(cfg: Config) -> None:
    """Integers within int64 and numbers finite, in every field. OmegaConf checks each
    value's type (on the command line and in a config.json read back); no value beyond
    int64 or an inf/nan is meant anywhere, and OmegaConf takes both."""
    _check_bounds(cfg, "")


def _check_bounds(value: Any, key: str) -> None:
    if is_dataclass(value):
        for f in fields(value):
            _check_bounds(getattr(value, f.name), f"{key}.{f.name}" if key else f.name)
    # Free-form mappings (job.params, storage_options) are their readers' to check.
    elif isinstance(value, dict):
        for name, item in value.items():
            if is_dataclass(item):
                _check_bounds(item, f"{key}.{name}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_bounds(item, f"{key}[{i}]")
    elif isinstance(value, int) and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]:
        raise ConfigError(key, f"got {show(value)}; expected an integer within int64 (|x| < 2**63)")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"got {value}; expected a finite number")


def _validate_home(home: str) -> None:
    """A folder (created if missing) that this user may write: journals, results, local
    stores and cluster records live there. Never empty: an empty home once put the
    stores at the filesystem root."""
    if not home.strip():
        raise ConfigError(
            "home",
            "is empty; give the folder for journals, results and local stores, e.g. home=~/.orchestrator "
            "(ORCHESTRATOR_HOME sets the default)",
        )
    local_path("home", home, "home")
    if "${" in home:
        # Taken literally here (ORCHESTRATOR_HOME too), it would be an interpolation in the
        # command lines a run hands on (the supervisor's resume, a sweep's runs).
        raise ConfigError("home", f"got {show(home)}; '${{' would be read as an interpolation: give a literal path")
    path = os.path.abspath(os.path.expanduser(home))
    existing = path
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        what = "is a file" if existing == path else f"lies under the file {existing!r}"
        raise ConfigError("home", f"got {show(home)}, which {what}; give a folder (it is created if missing)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            "home", f"got {show(home)}; {existing!r} is not writable by this user: give a folder you may write"
        )


def _validate_name(key: str, value: str, longest: int) -> None:
    if not safe_name(value) or len(value) > longest:
        raise ConfigError(
            key,
            f"got {show(value)}; expected a name of at most {longest} {NAME_RULE} (it names folders and clusters)",
        )


def validate_training(cfg: Config) -> None:
    """What trains and how: job.*, trainer.* and data.*. A search checks each of its trials
    with it too, the trial's values set (orchestrator.config.validate_search)."""
    _validate_job(cfg)
    local_path("job.code_dir", cfg.job.code_dir, "job.code_dir")
    bounded_int("job.steps", cfg.job.steps, 1, MAX_STEPS)
    bounded_int("job.batch_size", cfg.job.batch_size, 1, MAX_BATCH_SIZE)
    bounded_int("job.hidden_size", cfg.job.hidden_size, 1, MAX_HIDDEN_SIZE)
    bounded_int("job.seed", cfg.job.seed, 0, MAX_SEED)
    if not (math.isfinite(cfg.job.lr) and cfg.job.lr > 0.0):
        raise ConfigError("job.lr", f"got {cfg.job.lr}; expected a finite number > 0")
    if not 0.0 < cfg.job.eval_fraction < 1.0:
        raise ConfigError("job.eval_fraction", f"got {cfg.job.eval_fraction}; expected 0 < x < 1")
    positive_int("trainer.workers", cfg.trainer.workers)
    _validate_min_workers(cfg)
    at_least("trainer.cpus_per_worker", cfg.trainer.cpus_per_worker, MIN_CPUS, "CPUs")
    at_least("trainer.gpus_per_worker", cfg.trainer.gpus_per_worker, MIN_GPUS, "GPUs", off=True)
    non_negative_int("trainer.max_worker_restarts", cfg.trainer.max_worker_restarts)
    positive_int("trainer.grad_accum_steps", cfg.trainer.grad_accum_steps)
    positive_int("trainer.torch_threads", cfg.trainer.torch_threads)
    if not cfg.trainer.grad_clip_norm >= 0:
        raise ConfigError("trainer.grad_clip_norm", f"got {cfg.trainer.grad_clip_norm}; expected >= 0 (0: no clipping)")
    _validate_strategy(cfg)
    _validate_data(cfg.data)


_CLOCK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]{0,99}")


def _validate_job(cfg: Config) -> None:
    job = cfg.job
    if bool(job.workload) == bool(job.train_func):
        given = "both are set" if job.workload else "neither is set"
        raise ConfigError(
            "job.workload",
            f"{given}; set exactly one of job.workload (a built-in name or 'module:Class') and "
            "job.train_func ('module:function')",
        )
    if job.train_func:
        if cfg.data.loader != "sharded":
            raise ConfigError(
                "data.loader", "a Ray Train function loads its own data: only data.loader=sharded applies"
            )
        # A search's faults come at search steps, the search driver's (validate_chaos).
        for i, fault in enumerate([] if cfg.hpo.enabled else cfg.chaos.faults):
            if fault.kind == "corrupt_peer_state":
                raise ConfigError(
                    f"chaos.faults[{i}].kind",
                    "corrupt_peer_state flips a byte of the state the built-in loop's workers hold for a "
                    "replacement; a train function's workers hold none: use corrupt_checkpoint",
                )
    if job.clock and not job.train_func:
        raise ConfigError(
            "job.clock",
            f"got {job.clock!r}; a metric clock applies to a train function (job.train_func), whose reports it "
            "reads: a workload class counts optimizer steps, leave job.clock empty",
        )
    if job.clock and not _CLOCK_NAME.fullmatch(job.clock):
        raise ConfigError(
            "job.clock",
            f"got {job.clock[:80]!r}; expected the name of a metric the function reports (letters, digits, "
            "'_', '.', '/' or '-', at most 100), e.g. job.clock=epoch",
        )


def _validate_min_workers(cfg: Config) -> None:
    trainer = cfg.trainer
    if not 0 <= trainer.min_workers <= trainer.workers:
        raise ConfigError(
            "trainer.min_workers",
            f"got {trainer.min_workers}; expected 1 to trainer.workers ({trainer.workers}), or 0 for trainer.workers",
        )
    if trainer.min_world() == trainer.workers:
        return
    if cfg.job.train_func:
        raise ConfigError(
            "trainer.min_workers",
            "an elastic world needs the built-in training loop (job.workload), which keeps the global batch "
            "across world sizes; a Ray Train function (job.train_func) splits its batches itself: leave "
            "trainer.min_workers at 0",
        )
    if cfg.data.loader != "sharded":
        raise ConfigError(
            "trainer.min_workers",
            f"data.loader={cfg.data.loader} splits the data by Ray's own world size; an elastic world "
            "(trainer.min_workers < trainer.workers) needs data.loader=sharded",
        )
    if cfg.hpo.enabled:
        raise ConfigError("trainer.min_workers", "a search (hpo.enabled) trains trials in-process; leave it at 0")


def _validate_recovery(rec: RecoveryConfig) -> None:
    seconds("recovery.heartbeat_interval_s", rec.heartbeat_interval_s)
    seconds("recovery.heartbeat_timeout_s", rec.heartbeat_timeout_s)
    if rec.heartbeat_timeout_s < 2 * rec.heartbeat_interval_s:
        raise ConfigError(
            "recovery.heartbeat_timeout_s",
            f"got {rec.heartbeat_timeout_s}; expected at least twice "
            f"recovery.heartbeat_interval_s ({rec.heartbeat_interval_s})",
        )
    non_negative_int("recovery.max_failovers", rec.max_failovers)
    non_negative_int("recovery.max_restarts_on_errors", rec.max_restarts_on_errors)
    seconds("recovery.provision_timeout_s", rec.provision_timeout_s)
    seconds("recovery.store_outage_s", rec.store_outage_s)
    bounded_int("recovery.controller_restarts", rec.controller_restarts, 0, 100)
    if not 2 * rec.heartbeat_interval_s <= rec.controller_lease_s <= 3600:
        raise ConfigError(
            "recovery.controller_lease_s",
            f"got {rec.controller_lease_s}; expected between twice recovery.heartbeat_interval_s "
            f"({2 * rec.heartbeat_interval_s:g}) and 3600 seconds",
        )
    positive_int("recovery.health_failures_to_lose", rec.health_failures_to_lose)
    seconds("recovery.node_replace_timeout_s", rec.node_replace_timeout_s, off=True)
    seconds("recovery.region_cooldown_s", rec.region_cooldown_s, off=True)
    seconds("recovery.deadline_s", rec.deadline_s, off=True)
    if not (math.isfinite(rec.correlated_rate_per_h) and 0 <= rec.correlated_rate_per_h <= 1000):
        raise ConfigError(
            "recovery.correlated_rate_per_h",
            f"got {rec.correlated_rate_per_h}; expected losses an hour, 0..1000",
        )
    if rec.standby_pool is not None:
        _validate_name("recovery.standby_pool", rec.standby_pool, 64)
        if rec.standby:
            raise ConfigError(
                "recovery.standby_pool",
                "is set with recovery.standby=true; pick one (standby: a cluster of this run's own with "
                "its runtime waiting; standby_pool: one cluster per region shared by the pool's runs)",
            )
    _validate_hedge(rec)
    if rec.resume_errored and rec.restart_errored:
        raise ConfigError(
            "recovery.restart_errored",
            "resume_errored and restart_errored are both true; pick one (resume: from the last "
            "checkpoint, restart: from scratch)",
        )


def _validate_hedge(rec: RecoveryConfig) -> None:
    if not 0 <= rec.hedge_max_launches <= 1000:
        raise ConfigError(
            "recovery.hedge_max_launches", f"got {rec.hedge_max_launches}; expected 0 (no hedging) to 1000"
        )
    seconds("recovery.hedge_after_s", rec.hedge_after_s, off=True)
    if rec.hedge_after_s >= rec.heartbeat_timeout_s:
        raise ConfigError(
            "recovery.hedge_after_s",
            f"got {rec.hedge_after_s}, not under recovery.heartbeat_timeout_s ({rec.heartbeat_timeout_s}): "
            "by then the loss itself is declared; set it lower, or 0 for two and a half heartbeat intervals",
        )
    if rec.hedge_max_launches and (rec.standby or rec.standby_pool is not None):
        which = "recovery.standby=true" if rec.standby else "recovery.standby_pool"
        raise ConfigError(
            "recovery.hedge_max_launches",
            f"is set with {which}; pick one (a standby stands the whole run; a hedge only from "
            "a sign of trouble to the verdict)",
        )


def _validate_data(data: DataConfig) -> None:
    local_path("data.cache_dir", data.cache_dir, "data.cache_dir")
    positive_int("data.shuffle_buffer_rows", data.shuffle_buffer_rows)
    positive_int("data.samples", data.samples)
    positive_int("data.features", data.features)


def _validate_strategy(cfg: Config) -> None:
    """trainer.strategy=fsdp and its options: what the training loop of a workload can shard."""
    trainer = cfg.trainer
    fsdp = trainer.strategy == "fsdp"
    for key in ("param_dtype", "reduce_dtype"):
        value = getattr(trainer.fsdp, key)
        if value == "none":
            continue
        if not fsdp:
            raise ConfigError(f"trainer.fsdp.{key}", f"got {value}; it applies to trainer.strategy=fsdp only")
        if not trainer.gpus_per_worker > 0:
            raise ConfigError(
                f"trainer.fsdp.{key}",
                f"got {value}; a mixed-precision policy needs GPUs (trainer.gpus_per_worker > 0): "
                f"use trainer.fsdp.{key}=none on CPUs",
            )
    if not fsdp:
        return
    if cfg.hpo.enabled:
        raise ConfigError(
            "trainer.strategy",
            "fsdp shards one run's model across its workers; a search (hpo.enabled) trains "
            "each trial in one process: use trainer.strategy=ddp",
        )
    if trainer.autocast == "fp16":
        # The gradient scaler checks for inf/nan in the gradients it holds: under fsdp each
        # rank holds its own shard, and ranks that disagree on skipping a step diverge.
        raise ConfigError(
            "trainer.autocast",
            "fp16 scales gradients that trainer.strategy=fsdp shards across ranks, which this loop does not "
            "support: use trainer.autocast=bf16 (or auto), or trainer.strategy=ddp",
        )
    if cfg.job.train_func:
        raise ConfigError(
            "trainer.strategy",
            "fsdp applies to a workload class (job.workload); a train function (job.train_func) shards its "
            "model itself: drop trainer.strategy=fsdp",
        )
