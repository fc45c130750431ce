"""Typed configuration: the schemas Hydra validates against, and the checks it cannot do.

Hydra's DictConfig is converted to these dataclasses once, at the entry point, by
OmegaConf (types, closed sets, unknown keys); nothing below the entry point sees a
DictConfig. A provider's own checks of its regions live with the provider
(providers/registry.py), so this module imports none.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum, StrEnum
from typing import Any

from omegaconf import MISSING

from orchestrator.errors import ConfigError
from orchestrator.hpo import (
    MAX_TRIALS,
    max_search_steps,
    trial_count,
    validate_search_space,
)
from orchestrator.wire.faults import AT_POINT, DURING, NODE_FAULTS, STEP_TRIGGERS, STORAGE_FAULTS, During, FaultKind
from orchestrator.wire.faults import SEARCH_FAULTS as HPO_FAULTS
from orchestrator.wire.sections import Autocast, Loader, Metric, Mode, NoticeSource, Scheduler
from orchestrator.workloads import JOB_KEY_WORKLOADS
from recovery.storage import STORE_PROTOCOLS, find_secret, has_userinfo


# The closed sets. Member names equal their values: OmegaConf reads an enum-typed field by
# member name, and a StrEnum member compares (and hashes) equal to its value, so code
# that asks cfg.hpo.scheduler == "asha" reads on.
class Action(StrEnum):
    run = "run"
    status = "status"
    resume = "resume"
    report = "report"
    plan = "plan"
    list = "list"
    logs = "logs"


# Actions that read runs' files and launch nothing: they get only the checks of what they read.
READ_ONLY_ACTIONS = (Action.status, Action.report, Action.list, Action.logs)
# Actions about one run, which run_id names.
ONE_RUN_ACTIONS = (Action.status, Action.report, Action.resume, Action.logs)
# Actions that run the job and print its progress (and, with show_logs, its output).
RUNNING_ACTIONS = (Action.run, Action.resume)


class OutputFormat(StrEnum):
    """format: how action=list prints the runs."""

    table = "table"
    json = "json"


class PreemptionNotice(StrEnum):
    """cloud.regions.<name>.preemption_notice: NoticeSource's members, and auto (by the
    region's infra: aws/... is aws, gcp/... is gcp, anything else none)."""

    auto = "auto"
    none = "none"
    aws = "aws"
    gcp = "gcp"


class ProviderKind(StrEnum):
    """cloud.provider: providers/registry.py's PROVIDERS, one each."""

    local = "local"
    skypilot = "skypilot"


# Names that become folders, file names and cluster names: a run id is at most
# MAX_RUN_ID characters, and a generated one is the job's name plus 21.
MAX_RUN_ID = 100
MAX_JOB_NAME = 64
MAX_REGION_NAME = 63
NAME_RULE = "letters, digits, '-', '_' and '.', starting with a letter or digit"
# Every integer key fits the int64 that torch, numpy and JSON readers elsewhere assume.
INT64 = (-(2**63), 2**63 - 1)
# A step count or batch no run reaches (a billion steps at a thousand a second is eleven
# days), so a value beyond is a typo, refused before a cluster starts.
MAX_STEPS = 10**9
MAX_BATCH_SIZE = 2**24
# numpy's seeds are 32-bit unsigned.
MAX_SEED = 2**32 - 1
_CREDENTIAL_CHAINS = (
    "use the standard chains: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile for s3://, "
    "GOOGLE_APPLICATION_CREDENTIALS for gs://"
)


@dataclass
class JobConfig:
    name: str = MISSING
    # What trains, exactly one of: a workload class, a built-in name (digits, synthetic,
    # gpt) or "module:Class" (see orchestrator/workloads/base.py), or an unchanged Ray
    # Train function "module:function" that calls ray.train.report / get_checkpoint.
    workload: str = ""
    train_func: str = ""
    # Free-form, handed to the workload's constructor (validated against its Params
    # dataclass when it has one) or passed as the train function's config.
    params: dict[str, Any] = field(default_factory=dict)
    # A folder with the user's code (and an optional requirements.txt): first on the
    # PYTHONPATH of every cluster (SkyPilot: synced to the nodes, its requirements
    # installed by the setup). Empty: the controller's PYTHONPATH and working directory.
    code_dir: str = ""
    steps: int = 300
    seed: int = 0
    # Built-ins' batch() takes it per worker; a workload's dataset() takes it as the
    # global batch of one optimizer step, split evenly across workers and micro-batches.
    batch_size: int = 64
    # Built-in workloads (digits, synthetic) only; user workloads use job.params.
    lr: float = 0.01
    hidden_size: int = 256
    eval_fraction: float = 0.25


@dataclass
class TrainerConfig:
    workers: int = 2
    # Elastic resume: the fewest workers a run may go on with, after a node is lost
    # in its region or in a failover region with fewer CPUs or GPUs (0: trainer.workers,
    # no elasticity). The global batch stays that of trainer.workers workers.
    min_workers: int = 0
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    # Ray Train restarts the worker group in place this many times (FailureConfig).
    max_worker_restarts: int = 3
    # The training loop (job.workload): micro-batches per optimizer step, gradient
    # clipping by total norm (0: off), mixed precision (none | auto | bf16 | fp16; auto:
    # bf16 on a GPU that supports it, none on CPUs; fp16 adds a gradient scaler), and
    # torch's intra-op threads per worker.
    grad_accum_steps: int = 1
    grad_clip_norm: float = 0.0
    autocast: Autocast = Autocast.none
    torch_threads: int = 1

    def min_world(self) -> int:
        """min_workers with its default (0: workers) resolved."""
        from recovery.elastic import min_world

        return min_world(self.workers, self.min_workers)


@dataclass
class CheckpointConfig:
    interval_steps: int = 20
    keep_last: int = 3
    # Upload in the background while training goes on (false: training waits for each commit).
    async_upload: bool = True


@dataclass
class RegionConfig:
    """A region as the run's config describes it (cloud.regions.<name>), for every provider."""

    store: str = MISSING
    # Per node: the head and each worker node offer num_cpus CPUs and num_gpus GPUs.
    num_cpus: int = 2
    # cloud.provider=local: GPUs the region's Ray cluster offers (of this machine's).
    num_gpus: int = 0
    # The cluster's Ray nodes, the head included (SkyPilot regions may say num_nodes).
    nodes: int = 1
    # fsspec options for the store (endpoint_url, config_kwargs, requests_timeout,
    # op_timeout_s...). Never credentials: those come from the environment.
    storage_options: dict[str, Any] = field(default_factory=dict)
    # SkyPilot regions (cloud.provider=skypilot): where and on what; see conf/cloud/aws.yaml.
    # infra: "aws/us-east-1", "gcp/us-central1", "slurm/<cluster in ~/.slurm/config>", "k8s/<context>".
    infra: str = ""
    instance_type: str = ""
    cpus: str = ""  # SkyPilot's syntax: "4", "4+"
    memory: str = ""  # GB, "16", "16+"
    accelerators: str = ""  # "A10G:1"
    use_spot: bool = False
    disk_size: int = 0  # GB; 0: SkyPilot's default
    # SkyPilot's name for nodes: either may be given; if both are, they must agree.
    num_nodes: int = 1
    # Commands run once on the nodes (install the project), and the Python that runs the
    # runtime there; empty: the provider's defaults (a venv built from constraints.txt).
    setup: str = ""
    python: str = ""
    # Where the nodes hear of their reclaim ahead of it, polled every second: aws (IMDSv2's
    # spot/instance-action), gcp (the metadata server's instance/preempted), none, or auto
    # (by infra: aws/... aws, gcp/... gcp, anything else none). A notice makes the workers
    # checkpoint at an agreed step and stop; the run resumes elsewhere.
    preemption_notice: PreemptionNotice = PreemptionNotice.auto
    # The metadata service's base URL (http://host[:port]); empty: the cloud's own.
    preemption_notice_url: str = ""

    def node_count(self) -> int:
        """nodes, or SkyPilot's num_nodes where only that is given."""
        return self.nodes if self.nodes != 1 else self.num_nodes

    def notice_source(self) -> NoticeSource:
        """preemption_notice with auto resolved."""
        if self.preemption_notice is not PreemptionNotice.auto:
            return NoticeSource(self.preemption_notice.value)
        cloud = self.infra.split("/", 1)[0].lower()
        return NoticeSource(cloud) if cloud in (NoticeSource.aws, NoticeSource.gcp) else NoticeSource.none


@dataclass
class CloudConfig:
    name: str = MISSING
    provider: ProviderKind = MISSING
    regions: dict[str, RegionConfig] = field(default_factory=dict)
    # Ordered failover preference; empty means every region, in mapping order.
    candidates: list[str] = field(default_factory=list)
    # How long provisioning takes here: recovery.provision_timeout_s's default.
    provision_timeout_s: float = 60.0
    # Where the controller and the runtimes exchange heartbeats, progress, events and
    # the chaos rendezvous: an fsspec URL both can reach (the run's files go under
    # <control_store>/<run_id>/control). null: the run's folder on this machine, which
    # only clusters on this machine (local, on-prem here) can reach.
    control_store: str | None = None
    control_options: dict[str, Any] = field(default_factory=dict)
    # Each cluster's Ray dashboard, bound to 127.0.0.1 on the head (the cluster's own
    # machine: reach a cloud's through ssh -L); its URL is printed and journaled.
    # false: no dashboard (the processes and the CPU it takes are left out).
    dashboard: bool = False


@dataclass
class DataConfig:
    # sharded: each worker reads its own rows in-process; ray_data: a Ray Data dataset
    # split by Ray Train (get_dataset_shard + iter_torch_batches).
    loader: Loader = Loader.sharded
    # ray_data: rows in each worker's local shuffle buffer (seeded per epoch).
    shuffle_buffer_rows: int = 2048
    # workload=synthetic: the generated data set (deterministic from job.seed), cached on disk.
    samples: int = 200_000
    features: int = 256
    # Where generated data sets are cached; empty: <home>/data.
    cache_dir: str = ""


@dataclass
class HpoConfig:
    # A Ray Tune search over the job instead of one training run.
    enabled: bool = False
    metric: Metric = Metric.accuracy
    mode: Mode = Mode.max
    num_samples: int = 6
    max_concurrent: int = 2
    cpus_per_trial: float = 1.0
    scheduler: Scheduler = Scheduler.asha
    # Trial iterations (one iteration = steps_per_iteration training steps, then an evaluation
    # and a checkpoint); ASHA stops trials at rungs grace_period * reduction_factor**k.
    max_t: int = 6
    grace_period: int = 2
    reduction_factor: int = 2
    steps_per_iteration: int = 20
    # {job key: "distribution numbers..."}, e.g. {lr: "loguniform 0.01 0.2", hidden_size: "choice 32 64"};
    # distributions: choice, grid, uniform, loguniform, randint.
    search_space: dict[str, str] = field(default_factory=dict)
    # At most one snapshot of the experiment (state + trial checkpoints) per this many seconds.
    snapshot_interval_s: float = 1.0


@dataclass
class RecoveryConfig:
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 10.0
    max_failovers: int = 2
    max_restarts_on_errors: int = 1
    # Preemption notices survived (spot reclaims): a budget of their own.
    max_preemptions: int = 10
    provision_timeout_s: float = 60.0
    # A region that failed within this many seconds is skipped when choosing the next.
    region_cooldown_s: float = 600.0
    # Keep the next region's cluster up with the runtime waiting (faster failover, twice the clusters).
    standby: bool = False
    # A store that fails this long makes the runtime commit to the next region's store.
    store_outage_s: float = 15.0
    # Health checks in a row not UP (or failing) that, with no heartbeat within the lease,
    # are a lost cluster; fewer, or any with fresh heartbeats, are glitches (journaled).
    # A definitive answer (the cluster's record gone, its allocation gone) needs one.
    health_failures_to_lose: int = 3
    # A lost node (not the head) is replaced within this many seconds, the run staying in
    # its region; past it the run goes on with the workers that fit (trainer.min_workers)
    # or fails over. 0: never wait for a replacement.
    node_replace_timeout_s: float = 60.0
    # A search resumed in another region: errored trials continue from their last
    # checkpoint (resume_errored), or start over (restart_errored), or stay errored (both false).
    resume_errored: bool = True
    restart_errored: bool = False


@dataclass
class RandomTrigger:
    seed: int = 0
    # The chance that the fault fires at a step (the steps are drawn once, from the seed).
    rate: float = MISSING


@dataclass
class FaultConfig:
    kind: FaultKind = MISSING
    # When, exactly one of: at a training step; this many seconds into each attempt's
    # training; during checkpoint_upload | restore | provisioning | failover; or at
    # random steps ({seed, rate}).
    at_step: int | None = None
    after_s: float | None = None
    during: During | None = None
    random: RandomTrigger | None = None
    # How many times it may fire: a trigger that comes round again (a replayed step,
    # the next attempt) fires it again until then.
    repeat: int = 1
    # Storage faults: whose store (default: the region running at that step). Other
    # faults: fire only while the run is in this region.
    region: str | None = None
    # Storage faults and partitions: for how long (storage: 0 is to the end of the run).
    duration_s: float = 0.0
    latency_ms: float = 0.0
    bandwidth_kbps: float = 0.0
    # preempt: the notice's grace period before the machines are reclaimed.
    grace_s: float = 30.0
    # status_flap: how many of the provider's health checks in a row fail.
    count: int = 1
    # kill_node / hang_node: which node (1 ..., the head is 0, which kill_head takes);
    # null: one drawn from seed among the cluster's worker nodes.
    node: int | None = None
    seed: int = 0


@dataclass
class ChaosConfig:
    faults: list[FaultConfig] = field(default_factory=list)
    # Restart a crashed controller with action=resume, as a service manager would
    # (false: leave it to the user, which is what the resume tests exercise).
    supervise: bool = True


# The longest notify.timeout_s: the end of a run waits for its last notification up to this long.
MAX_NOTIFY_TIMEOUT_S = 60.0
NOTIFY_SCHEMES = ("http", "https")
# notify.webhook=env:VARNAME: the URL is read from the environment variable VARNAME at the
# run's start, so that it is never typed on a command line (or kept in a shell's history).
NOTIFY_ENV = "env:"
# How a run's config.json names a notify target it does not hold whole: this prefix, then
# what may be shown of it (the webhook's scheme://host[:port], the command's program). The
# whole value is in the run's notify.secret (0600; orchestrator/notify/secret.py).
NOTIFY_KEPT = "notify.secret:"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class NotifyConfig:
    """Who hears of the run's incidents, failovers and end (README "Notifications")."""

    # A program and its arguments, split into words as a shell would (shlex; no shell runs
    # it, so no pipes or redirections): each notification's JSON on its stdin, and
    # ORCHESTRATOR_RUN_ID, ORCHESTRATOR_EVENT, ORCHESTRATOR_STATUS, ORCHESTRATOR_JOB in its
    # environment. A string like cloud.regions.<name>.setup and .python. null: none. Its
    # arguments may carry a token: the run keeps it whole in notify.secret only.
    command: str | None = None
    # An http:// or https:// URL that gets each notification as a JSON POST, or env:VARNAME
    # to read it from the environment at the run's start. Its path and query may carry a
    # token: the run keeps it whole in notify.secret only; config.json and the journal name
    # it by scheme and host. null: none.
    webhook: str | None = None
    # Each delivery's deadline, in seconds: a command still running is killed, a server
    # that has not answered is left; either is journaled (notify_failed) and the run goes on.
    timeout_s: float = 5.0

    def argv(self) -> list[str]:
        """The command as the words it runs (empty: no command)."""
        return shlex.split(self.command) if self.command else []

    def endpoint(self) -> str | None:
        """The webhook as the journal names it: scheme and host (and port), never path or query."""
        if self.webhook is None:
            return None
        if self.webhook.startswith((NOTIFY_KEPT, NOTIFY_ENV)):
            return kept_shown(self.webhook) or self.webhook  # env:VARNAME names no secret
        return webhook_endpoint(self.webhook)

    def kept(self) -> bool:
        """Whether a target is named as kept in the run's notify.secret (a config.json read back)."""
        return any(kept_shown(v) is not None for v in (self.command, self.webhook))


def kept_shown(value: str | None) -> str | None:
    """What a config.json shows of a notify target kept in notify.secret; None if ``value``
    is no such name (a target given whole, or none)."""
    if value is None or not value.startswith(NOTIFY_KEPT):
        return None
    return value[len(NOTIFY_KEPT) :]


def env_name(value: str | None) -> str | None:
    """VARNAME of notify.webhook=env:VARNAME; None for anything else."""
    if value is None or not value.startswith(NOTIFY_ENV):
        return None
    return value[len(NOTIFY_ENV) :]


def webhook_endpoint(url: str) -> str:
    """``scheme://host[:port]`` of a URL: what may be shown of one that may carry a token."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


@dataclass
class MetricsConfig:
    """Where a run's numbers go besides result.json (README "Metrics")."""

    # TensorBoard event files under <home>/runs/<run_id>/tensorboard/, written by the
    # controller from what the run reports: loss, steps/s, telemetry, final metrics,
    # replication lag and a marker at each incident.
    tensorboard: bool = True


@dataclass
class Config:
    job: JobConfig = field(default_factory=JobConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    cloud: CloudConfig = field(default_factory=CloudConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    chaos: ChaosConfig = field(default_factory=ChaosConfig)
    data: DataConfig = field(default_factory=DataConfig)
    hpo: HpoConfig = field(default_factory=HpoConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    action: Action = Action.run
    run_id: str | None = None
    home: str = "~/.orchestrator"
    # Print a live progress line while the run goes on.
    progress: bool = True
    # action=list: a table for people, or a JSON list (one flat object per run) for scripts.
    format: OutputFormat = OutputFormat.table
    # action=logs: the attempt (default: the newest), the log ("driver" or a rank number;
    # default: the driver's and every rank's), and whether to follow the run to its end.
    attempt: int | None = None
    rank: str | None = None
    follow: bool = False
    # action=run and resume: print the driver's and the ranks' output live, above the progress line.
    show_logs: bool = False

    @property
    def home_path(self) -> str:
        return os.path.abspath(os.path.expanduser(self.home))

    def candidate_regions(self) -> list[str]:
        return list(self.cloud.candidates) or list(self.cloud.regions)


# Keys that shape what this command prints, not the run: the journal's copy of the config
# leaves them out, and a config.json may lack them (one written before format existed).
DISPLAY_KEYS = ("progress", "format", "attempt", "rank", "follow", "show_logs")


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
    if cfg.action in READ_ONLY_ACTIONS:
        return cfg
    _validate_name("job.name", cfg.job.name, MAX_JOB_NAME)
    _validate_job(cfg)
    _bounded_int("job.steps", cfg.job.steps, 1, MAX_STEPS)
    _bounded_int("job.batch_size", cfg.job.batch_size, 1, MAX_BATCH_SIZE)
    _positive_int("job.hidden_size", cfg.job.hidden_size)
    _bounded_int("job.seed", cfg.job.seed, 0, MAX_SEED)
    if not (math.isfinite(cfg.job.lr) and cfg.job.lr > 0.0):
        raise ConfigError("job.lr", f"got {cfg.job.lr}; expected a finite number > 0")
    if not 0.0 < cfg.job.eval_fraction < 1.0:
        raise ConfigError("job.eval_fraction", f"got {cfg.job.eval_fraction}; expected 0 < x < 1")
    _positive_int("trainer.workers", cfg.trainer.workers)
    _validate_min_workers(cfg)
    if cfg.trainer.cpus_per_worker <= 0:
        raise ConfigError("trainer.cpus_per_worker", f"got {cfg.trainer.cpus_per_worker}; expected a number > 0")
    if cfg.trainer.gpus_per_worker < 0:
        raise ConfigError("trainer.gpus_per_worker", f"got {cfg.trainer.gpus_per_worker}; expected >= 0")
    _non_negative_int("trainer.max_worker_restarts", cfg.trainer.max_worker_restarts)
    _positive_int("trainer.grad_accum_steps", cfg.trainer.grad_accum_steps)
    _positive_int("trainer.torch_threads", cfg.trainer.torch_threads)
    if not cfg.trainer.grad_clip_norm >= 0:
        raise ConfigError("trainer.grad_clip_norm", f"got {cfg.trainer.grad_clip_norm}; expected >= 0 (0: no clipping)")
    _positive_int("checkpoint.interval_steps", cfg.checkpoint.interval_steps)
    if cfg.checkpoint.keep_last < 2:
        raise ConfigError(
            "checkpoint.keep_last",
            f"got {cfg.checkpoint.keep_last}; expected >= 2 so a corrupt newest checkpoint "
            "still leaves one to fall back to",
        )
    _validate_cloud(cfg)
    _validate_recovery(cfg.recovery)
    _validate_data(cfg.data)
    _validate_hpo(cfg)
    _validate_chaos(cfg)
    validate_notify(cfg.notify)
    return cfg


def validate_logs_keys(cfg: Config) -> None:
    """attempt, rank and follow belong to action=logs; show_logs to a run (or resume)."""
    given = {"attempt": cfg.attempt is not None, "rank": cfg.rank is not None, "follow": cfg.follow}
    for key, is_given in given.items():
        if is_given and cfg.action is not Action.logs:
            raise ConfigError(key, f"only action=logs takes it: drop {key}=..., or add action=logs run_id=<id>")
    if cfg.show_logs and cfg.action not in RUNNING_ACTIONS:
        raise ConfigError(
            "show_logs", f"prints a running job's output; action={cfg.action} runs none: use action=logs run_id=<id>"
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
    if "\x00" in home:
        raise ConfigError("home", f"got {show(home)}; a path cannot hold a NUL character")
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
    if not _safe_name(value) or len(value) > longest:
        raise ConfigError(
            key,
            f"got {show(value)}; expected a name of at most {longest} {NAME_RULE} (it names folders and clusters)",
        )


def _validate_url(key: str, url: str, example: str) -> None:
    """A store's URL: absolute, of STORE_PROTOCOLS, with no credential in it."""
    if has_userinfo(url):
        raise ConfigError(
            key,
            "holds a user name or password ('user:pass@'); credentials do not belong in a config "
            f"(it is written to disk): remove it and {_CREDENTIAL_CHAINS}",
        )
    proto, sep, rest = url.partition("://")
    if not sep or proto not in STORE_PROTOCOLS:
        why = "; memory:// lives in one process, where no cluster reaches it" if proto == "memory" else ""
        raise ConfigError(
            key,
            f"got {show(url)}; expected a URL of {', '.join(p + '://' for p in STORE_PROTOCOLS)}, "
            f"such as {example}{why}",
        )
    if proto == "file" and not rest.startswith("/"):
        raise ConfigError(
            key,
            f"got {show(url)}; a file:// URL needs an absolute path: file:///abs/path (three slashes) or file://~/path",
        )
    if proto != "file" and not rest.split("/", 1)[0]:
        raise ConfigError(key, f"got {show(url)}; expected a bucket: {proto}://bucket/prefix")


def _validate_options(key: str, options: dict[str, Any]) -> None:
    """No credential at any depth of fsspec options (see recovery.storage.find_secret)."""
    found = find_secret(options)
    if found is None:
        return
    path, why = found
    if why == "userinfo":
        message = "holds a user name or password in a URL ('user:pass@'); credentials do not belong in a config"
    else:
        message = "credentials do not belong in a config"
    raise ConfigError(f"{key}.{path}", f"{message} (it is written to disk); {_CREDENTIAL_CHAINS}")


def _validate_job(cfg: Config) -> None:
    job = cfg.job
    if bool(job.workload) == bool(job.train_func):
        given = "both are set" if job.workload else "neither is set"
        raise ConfigError(
            "job.workload",
            f"{given}; set exactly one of job.workload (a built-in name or 'module:Class') and "
            "job.train_func ('module:function')",
        )
    if cfg.hpo.enabled and job.workload and job.workload not in JOB_KEY_WORKLOADS:
        raise ConfigError(
            "job.workload",
            f"got {job.workload!r}; a search (hpo.enabled) varies job.lr, job.hidden_size and job.batch_size, "
            f"which only the built-ins {', '.join(JOB_KEY_WORKLOADS)} read",
        )
    if job.train_func:
        if cfg.hpo.enabled:
            raise ConfigError("job.train_func", "a search (hpo.enabled) trains a workload class; use job.workload")
        if cfg.data.loader != "sharded":
            raise ConfigError(
                "data.loader", "a Ray Train function loads its own data: only data.loader=sharded applies"
            )
        for i, fault in enumerate(cfg.chaos.faults):
            step_trigger = next((t for t in STEP_TRIGGERS if getattr(fault, t) is not None), None)
            if step_trigger or fault.kind in ("user_error", "kill_worker"):
                raise ConfigError(
                    f"chaos.faults[{i}]" + (f".{step_trigger}" if step_trigger else ".kind"),
                    f"{fault.kind} with {step_trigger or 'this kind'} needs the built-in training loop's step "
                    "rendezvous; with job.train_func use after_s or during",
                )


def _validate_cloud(cfg: Config) -> None:
    cloud = cfg.cloud
    if not cloud.regions:
        raise ConfigError("cloud.regions", f"cloud {cloud.name!r} defines no region")
    for name, region in cloud.regions.items():
        if not _safe_name(name) or len(name) > MAX_REGION_NAME:
            raise ConfigError(
                f"cloud.regions.{show(name)[1:-1]}", f"region names are at most {MAX_REGION_NAME} {NAME_RULE}"
            )
        _validate_url(f"cloud.regions.{name}.store", region.store, "file:///path or s3://bucket/prefix")
        _validate_options(f"cloud.regions.{name}.storage_options", region.storage_options)
        _positive_int(f"cloud.regions.{name}.num_cpus", region.num_cpus)
        _positive_int(f"cloud.regions.{name}.nodes", region.nodes)
        _positive_int(f"cloud.regions.{name}.num_nodes", region.num_nodes)
        if region.nodes != 1 and region.num_nodes != 1 and region.nodes != region.num_nodes:
            raise ConfigError(
                f"cloud.regions.{name}.nodes",
                f"got {region.nodes} but num_nodes is {region.num_nodes}; they name the same count, give one",
            )
        _non_negative_int(f"cloud.regions.{name}.num_gpus", region.num_gpus)
        validate_notice(name, region)
    if cloud.control_store is not None:
        _validate_url(
            "cloud.control_store", cloud.control_store, "s3://bucket/control (the controller and the clusters reach it)"
        )
    _validate_options("cloud.control_options", cloud.control_options)
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
    # CPUs only here: each provider's validate_region checks GPUs its own way.
    fits = {name: region_workers(cloud.regions[name], cfg.trainer, gpus=False) for name in cfg.candidate_regions()}
    least = cfg.trainer.min_world()
    if fits and max(fits.values()) < least:
        name = max(fits, key=lambda n: fits[n])
        region = cloud.regions[name]
        raise ConfigError(
            "trainer.workers",
            f"{least} workers x {cfg.trainer.cpus_per_worker:g} CPUs (trainer.min_workers, or trainer.workers) "
            f"fit in no candidate region: the largest, {name!r}, has {region.node_count()} node(s) of "
            f"{region.num_cpus} CPUs; lower trainer.workers or trainer.cpus_per_worker, or raise "
            "cloud.regions.<name>.num_cpus or .nodes",
        )


def region_workers(region: RegionConfig, trainer: TrainerConfig, gpus: bool = True) -> int:
    """Workers the region fits: its nodes, each of num_cpus CPUs and num_gpus GPUs
    (SkyPilot's: its accelerators' count); ``gpus`` False: by CPUs alone."""
    from recovery.elastic import capacity

    per_node = float(region.num_gpus)
    if not per_node and region.accelerators:
        per_node = _accelerator_count(region.accelerators)
    return capacity(
        region.node_count(),
        region.num_cpus,
        per_node,
        trainer.cpus_per_worker,
        trainer.gpus_per_worker if gpus else 0.0,
    )


def _accelerator_count(accelerators: str) -> float:
    # SkyPilot's "A10G:1" per node; a bad one is its validate_region's to refuse.
    try:
        return float(accelerators.rsplit(":", 1)[1]) if ":" in accelerators else 1.0
    except ValueError:
        return 0.0


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


def validate_notice(name: str, region: RegionConfig) -> None:
    """A region's preemption_notice_url: only where the region watches for a notice, and a
    plain-http base URL (what the runtime asks, without a proxy, with short timeouts)."""
    from urllib.parse import urlsplit

    key = f"cloud.regions.{name}.preemption_notice_url"
    url = region.preemption_notice_url
    if not url:
        return
    if region.notice_source() is NoticeSource.none:
        raise ConfigError(
            key,
            f"is set but region {name!r} watches for no notice (preemption_notice resolves to none); "
            f"set cloud.regions.{name}.preemption_notice=aws or gcp, or drop the URL",
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port out of range or not a number raises here
    except ValueError:
        parts = None
    if parts is not None and "@" in parts.netloc:
        # Not shown: what precedes the @ may be a password.
        raise ConfigError(key, "holds a user name or password ('user:pass@'); the metadata service takes none")
    if (
        parts is None
        or parts.scheme != "http"
        or not parts.hostname
        or parts.query
        or parts.fragment
        or any(c.isspace() or not c.isprintable() for c in url)
    ):
        raise ConfigError(
            key,
            f"got {show(url)}; expected the metadata service's base URL, http://host[:port] "
            "(plain http, no query or fragment), e.g. http://169.254.169.254",
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
    _positive_int("recovery.health_failures_to_lose", rec.health_failures_to_lose)
    if not rec.node_replace_timeout_s >= 0:
        raise ConfigError(
            "recovery.node_replace_timeout_s", f"got {rec.node_replace_timeout_s}; expected >= 0 (0: no replacement)"
        )
    if rec.region_cooldown_s < 0:
        raise ConfigError("recovery.region_cooldown_s", f"got {rec.region_cooldown_s}; expected >= 0")
    if rec.resume_errored and rec.restart_errored:
        raise ConfigError(
            "recovery.restart_errored",
            "resume_errored and restart_errored are both true; pick one (resume: from the last "
            "checkpoint, restart: from scratch)",
        )


def _validate_data(data: DataConfig) -> None:
    _positive_int("data.shuffle_buffer_rows", data.shuffle_buffer_rows)
    _positive_int("data.samples", data.samples)
    _positive_int("data.features", data.features)


def _validate_hpo(cfg: Config) -> None:
    hpo = cfg.hpo
    if not hpo.enabled:
        return
    for key in ("num_samples", "max_concurrent", "max_t", "grace_period", "steps_per_iteration"):
        _positive_int(f"hpo.{key}", getattr(hpo, key))
    if hpo.reduction_factor < 2:
        raise ConfigError("hpo.reduction_factor", f"got {hpo.reduction_factor}; expected an integer >= 2")
    if hpo.grace_period > hpo.max_t:
        raise ConfigError("hpo.grace_period", f"got {hpo.grace_period}; expected <= hpo.max_t ({hpo.max_t})")
    if hpo.cpus_per_trial <= 0:
        raise ConfigError("hpo.cpus_per_trial", f"got {hpo.cpus_per_trial}; expected a number > 0")
    if hpo.snapshot_interval_s < 0:
        raise ConfigError("hpo.snapshot_interval_s", f"got {hpo.snapshot_interval_s}; expected >= 0")
    if cfg.data.loader != "sharded":
        raise ConfigError("data.loader", "a search trains each trial in-process: only data.loader=sharded applies")
    for name in cfg.candidate_regions():
        have = cfg.cloud.regions[name].num_cpus
        if hpo.cpus_per_trial > have:
            raise ConfigError(
                "hpo.cpus_per_trial",
                f"got {hpo.cpus_per_trial:g}; region {name!r} has {have} CPUs, so no trial could start",
            )
    validate_search_space(hpo.search_space)
    if (n := trial_count(hpo.search_space, hpo.num_samples)) > MAX_TRIALS:
        raise ConfigError(
            "hpo.num_samples",
            f"the search would run {n} trials (num_samples times every grid combination); at most {MAX_TRIALS}",
        )


def validate_notify(notify: NotifyConfig) -> None:
    """Targets that could never work are refused before the run starts, not found out at
    its first incident. No message shows the webhook's URL or the command's arguments:
    a token may be in either."""
    if env_name(notify.webhook) is not None:
        _validate_env_name(str(env_name(notify.webhook)))
    elif kept_shown(notify.webhook) is not None:
        _validate_kept_webhook(str(kept_shown(notify.webhook)))
    elif notify.webhook is not None:
        _validate_webhook(notify.webhook)
    if kept_shown(notify.command) is not None:
        if not str(kept_shown(notify.command)).strip():
            raise ConfigError("notify.command", f"{NOTIFY_KEPT!r} names no program; expected {NOTIFY_KEPT}PROGRAM")
    elif notify.command is not None:
        try:
            argv = notify.argv()
        except ValueError as exc:
            raise ConfigError(
                "notify.command", f"cannot be split into words ({exc}); close its quotes, or null for none"
            ) from None
        if not argv:
            raise ConfigError(
                "notify.command", "is empty; give a program and its arguments, e.g. 'python3 notify.py', or null"
            )
    if not notify.timeout_s > 0:
        raise ConfigError("notify.timeout_s", f"got {notify.timeout_s}; expected seconds > 0")
    if notify.timeout_s > MAX_NOTIFY_TIMEOUT_S:
        raise ConfigError(
            "notify.timeout_s",
            f"got {notify.timeout_s}; at most {MAX_NOTIFY_TIMEOUT_S:g} (the end of a run waits for its last "
            "notification up to this long)",
        )


def _validate_env_name(name: str) -> None:
    if not _ENV_NAME.fullmatch(name):
        raise ConfigError(
            "notify.webhook",
            # Not shown: a URL given as env:https://... would be.
            "names no environment variable after env:; expected env:VARNAME (letters, digits and _, "
            "not starting with a digit)",
        )


def _validate_kept_webhook(shown: str) -> None:
    """``notify.secret:scheme://host[:port]``: a config.json's name for a webhook kept in
    the run's notify.secret. Anything more (a path, a query) is refused, unshown: a token
    may have been written there by hand."""
    try:
        _validate_webhook(shown)
        whole = webhook_endpoint(shown) == shown
    except ConfigError:
        whole = False
    if not whole:
        raise ConfigError(
            "notify.webhook",
            f"names a webhook kept in notify.secret by more or less than its scheme and host; expected "
            f"{NOTIFY_KEPT}https://host",
        )


def refuse_kept(notify: NotifyConfig) -> None:
    """A ``notify.secret:`` name is a run's config.json's to write, never a user's to give:
    a new run has no notify.secret to take the target from."""
    for key, value in (("notify.webhook", notify.webhook), ("notify.command", notify.command)):
        if kept_shown(value) is not None:
            given = "the URL, or env:VARNAME" if key == "notify.webhook" else "the command"
            raise ConfigError(
                key,
                f"{NOTIFY_KEPT}... is how a run's config.json names a target kept in the run's notify.secret; "
                f"give {given}",
            )


def notify_from_env(notify: NotifyConfig, environ: Mapping[str, str] | None = None) -> NotifyConfig:
    """``notify`` with notify.webhook=env:VARNAME replaced by the URL in VARNAME, at the run's
    start; ConfigError naming notify.webhook and VARNAME (never the value) if VARNAME is unset
    or holds no http:// or https:// URL. Anything else is returned as it is."""
    from dataclasses import replace

    name = env_name(notify.webhook)
    if name is None:
        return notify
    env = os.environ if environ is None else environ
    url = env.get(name)
    if url is None:
        raise ConfigError(
            "notify.webhook",
            f"{NOTIFY_ENV}{name}: the environment variable {name} is not set; export it with the webhook's URL",
        )
    try:
        _validate_webhook(url)
    except ConfigError as exc:
        why = str(exc).removeprefix("notify.webhook: ")
        raise ConfigError(
            "notify.webhook", f"{NOTIFY_ENV}{name}: {name} holds no usable http:// or https:// URL ({why})"
        ) from None
    return replace(notify, webhook=url)


def check_notify_program(notify: NotifyConfig) -> None:
    """notify.command's program can be run here: checked for a new run (with the user's
    code), not in validate, since a resume must not be refused for what only
    notifications need (a failing command is journaled then, never fatal)."""
    argv = notify.argv()
    if argv and shutil.which(argv[0]) is None:
        raise ConfigError(
            "notify.command",
            f"{show(argv[0])} is not a program that can be run (on PATH, or a path to an executable file)",
        )


def _validate_webhook(url: str) -> None:
    from urllib.parse import urlsplit

    key = "notify.webhook"
    if not url.strip():
        raise ConfigError(key, "is empty; give an http:// or https:// URL, or null for none")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ConfigError(key, "holds a space or a control character; percent-encode it")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port out of range or not a number raises here
    except ValueError as exc:
        raise ConfigError(
            key, f"is no URL that can be read ({_no_url_in(exc, url)}); expected https://host/path"
        ) from None
    scheme = parts.scheme.lower()
    if "://" in url and scheme not in NOTIFY_SCHEMES:
        raise ConfigError(
            key, f"got a URL of scheme {show(scheme)}; expected http:// or https:// (it receives a JSON POST)"
        )
    if scheme not in NOTIFY_SCHEMES or not parts.netloc:
        raise ConfigError(key, "is no absolute URL; expected an http:// or https:// URL (it receives a JSON POST)")
    if "@" in parts.netloc:
        raise ConfigError(
            key,
            "holds a user name or password ('user:pass@'), which is never sent; put the token in the URL's "
            "path or query, which only this run's notify.secret keeps",
        )
    if not parts.hostname:
        raise ConfigError(key, f"got {scheme}:// with no host; expected {scheme}://host/path")


def _no_url_in(exc: ValueError, url: str) -> str:
    # urllib's message, without the URL should it quote it (a token may be in it).
    return str(exc).replace(url, "...")


def total_steps(cfg: Config) -> int:
    """The run's last step: job.steps, or for a search its most search steps (see orchestrator/hpo.py)."""
    if cfg.hpo.enabled:
        return max_search_steps(trial_count(cfg.hpo.search_space, cfg.hpo.num_samples), cfg.hpo.max_t)
    return cfg.job.steps


def _validate_chaos(cfg: Config) -> None:
    for i, fault in enumerate(cfg.chaos.faults):
        if cfg.hpo.enabled and fault.kind not in HPO_FAULTS:
            raise ConfigError(
                f"chaos.faults[{i}].kind",
                f"got {fault.kind!r}; a search (hpo.enabled) takes: {', '.join(HPO_FAULTS)}",
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
        _validate_trigger(cfg, i, fault)
        _validate_node_fault(cfg, i, fault)
    kinds = {f.kind for f in cfg.chaos.faults}
    if "controller_crash" in kinds and kinds & set(STORAGE_FAULTS):
        raise ConfigError(
            "chaos.faults",
            "controller_crash cannot be combined with storage faults: their fault proxies live in the "
            "controller and go down with it; drill them in separate runs",
        )


def _validate_node_fault(cfg: Config, i: int, fault: FaultConfig) -> None:
    """kill_node and hang_node strike a worker node (1 ...) of a region that has one."""
    key = f"chaos.faults[{i}]"
    if fault.kind not in NODE_FAULTS:
        if fault.node is not None:
            raise ConfigError(f"{key}.node", f"{fault.kind} takes no node; only {' and '.join(NODE_FAULTS)} do")
        return
    _bounded_int(f"{key}.seed", fault.seed, 0, MAX_SEED)
    if fault.node is not None and fault.node < 1:
        raise ConfigError(
            f"{key}.node",
            f"got {fault.node}; expected a worker node's index, 1 or more (the head, 0, is kill_head's), "
            "or null to draw one from seed",
        )
    regions = [fault.region] if fault.region else cfg.candidate_regions()
    most = max(cfg.cloud.regions[r].node_count() for r in regions)
    if most < 2:
        where = f"region {fault.region!r} has none" if fault.region else "no candidate region has one"
        raise ConfigError(
            f"{key}.kind",
            f"{fault.kind} strikes a worker node and {where}: set cloud.regions.<name>.nodes to 2 or more",
        )
    if fault.node is not None and fault.node >= most:
        raise ConfigError(
            f"{key}.node",
            f"got {fault.node}; the regions it may strike have worker nodes 1..{most - 1} "
            "(cloud.regions.<name>.nodes counts the head)",
        )


def _validate_trigger(cfg: Config, i: int, fault: FaultConfig) -> None:
    key = f"chaos.faults[{i}]"
    given = [
        name
        for name, value in (
            ("at_step", fault.at_step),
            ("after_s", fault.after_s),
            ("during", fault.during),
            ("random", fault.random),
        )
        if value is not None
    ]
    if len(given) != 1:
        raise ConfigError(
            key,
            f"{fault.kind} needs exactly one trigger, got {', '.join(given) or 'none'}; give one of "
            "at_step: N, after_s: SECONDS, during: " + "|".join(DURING) + ", random: {seed: S, rate: R}",
        )
    if fault.repeat < 1:
        raise ConfigError(f"{key}.repeat", f"got {fault.repeat}; expected an integer >= 1")
    last = total_steps(cfg)
    if fault.at_step is not None and not 1 <= fault.at_step <= last:
        what = "search steps: trials * (hpo.max_t + 1)" if cfg.hpo.enabled else "job.steps"
        raise ConfigError(f"{key}.at_step", f"got {fault.at_step}; expected a step in 1..{last} ({what})")
    if cfg.hpo.enabled and fault.at_step is None:
        raise ConfigError(key, f"a search (hpo.enabled) triggers {fault.kind} by at_step (a search step) only")
    if fault.after_s is not None and fault.after_s <= 0:
        raise ConfigError(f"{key}.after_s", f"got {fault.after_s}; expected seconds > 0")
    if fault.random is not None:
        _bounded_int(f"{key}.random.seed", fault.random.seed, 0, MAX_SEED)
    if fault.random is not None and not 0.0 < fault.random.rate <= 1.0:
        raise ConfigError(f"{key}.random.rate", f"got {fault.random.rate}; expected 0 < rate <= 1")
    if fault.grace_s <= 0:
        raise ConfigError(f"{key}.grace_s", f"got {fault.grace_s}; expected seconds > 0")
    if fault.count < 1:
        raise ConfigError(f"{key}.count", f"got {fault.count}; expected an integer >= 1 (health checks that fail)")
    if fault.kind == "user_error" and (fault.after_s is not None or fault.during not in (None, "restore")):
        raise ConfigError(
            key, "user_error is raised by the workload itself: trigger it with at_step, random or during: restore"
        )
    if fault.kind == "kill_worker" and fault.after_s is not None:
        raise ConfigError(
            f"{key}.after_s", "kill_worker picks its victim at a rendezvous: use at_step, random or during"
        )
    if fault.during is None:
        return
    allowed = AT_POINT.get(fault.during)
    if allowed is not None and fault.kind not in allowed:
        raise ConfigError(
            f"{key}.during",
            f"{fault.kind} needs a running attempt; during: {fault.during} allows {', '.join(allowed)}",
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


def _bounded_int(key: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise ConfigError(key, f"got {show(value)}; expected an integer in {lo}..{hi}")


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def _safe_name(name: str) -> bool:
    """ASCII letters, digits, '-', '_', '.', starting with a letter or digit: no path
    (no '/', no '..'), no option ('-x'), nothing a shell or a cluster name mangles."""
    return bool(name) and name[0].isascii() and name[0].isalnum() and set(name) <= _NAME_CHARS


def show(value: Any, limit: int = 60) -> str:
    """A value for a one-line message: repr (control characters escaped), cut to ``limit``."""
    try:
        text = repr(value)
    except ValueError:  # an integer beyond Python's digit limit for str()
        return "a number of thousands of digits"
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-2:]} ({len(str(value))} characters)"


def to_plain(obj: Any) -> Any:
    """A dataclass tree as JSON-able dicts (for specs and the journal), a closed set's
    member as its plain string: the runtime and readers of config.json know no enums."""
    from dataclasses import asdict

    return asdict(obj, dict_factory=_plain_items) if is_dataclass(obj) else obj


def _plain_items(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {k: v.value if isinstance(v, Enum) else v for k, v in items}
