"""Typed configuration: the schemas Hydra validates against (one dataclass per section).

Hydra's DictConfig is converted to these dataclasses once, at the entry point, by
OmegaConf (types, closed sets, unknown keys); nothing below the entry point sees a
DictConfig. The checks the schema cannot express are ``validate``'s; a provider's own
checks of its regions live with the provider (providers/registry.py), so this module
imports none.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from omegaconf import MISSING

from orchestrator.wire.faults import During, FaultKind, NodeRole
from orchestrator.wire.sections import (
    ActivationCheckpointing,
    Autocast,
    Loader,
    Mode,
    NoticeSource,
    Precision,
    ReuseProcesses,
    Scheduler,
    SearchAlg,
    Strategy,
)


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
    stop = "stop"
    cancel = "cancel"
    drill = "drill"
    watch = "watch"
    console = "console"


# Actions that read runs' files and launch nothing (stop writes its request alone): they
# get only the checks of what they read.
READ_ONLY_ACTIONS = (
    Action.status,
    Action.report,
    Action.list,
    Action.logs,
    Action.stop,
    Action.cancel,
    Action.drill,
    Action.watch,
    Action.console,
)
# Actions about one run, which run_id names.
ONE_RUN_ACTIONS = (
    Action.status,
    Action.report,
    Action.resume,
    Action.logs,
    Action.stop,
    Action.cancel,
    Action.drill,
    Action.watch,
)
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


class Placement(StrEnum):
    """recovery.placement: where a run starts and fails over to."""

    listed = "listed"  # cloud.candidates in their order, skipping regions cooling down
    cost = "cost"  # the lowest expected cost to finish (recovery/placement.py)


class DeadlinePolicy(StrEnum):
    """recovery.deadline_policy: when a run with a deadline leaves spot for on-demand."""

    greedy = "greedy"  # once the slack would not absorb one more loss and restart
    uniform_progress = "uniform_progress"  # also while behind the straight line to the deadline


class AutoOff(StrEnum):
    """recovery.survivors, recovery.peer_restore and recovery.spares: on where the run
    allows it, or off."""

    auto = "auto"
    off = "off"


class TrackerKind(StrEnum):
    """tracking.kind: the experiment tracker a run's params, metrics and incidents go to."""

    none = "none"
    mlflow = "mlflow"
    wandb = "wandb"


class TrackerMode(StrEnum):
    """tracking.mode: whether W&B sends as the run goes, or keeps its files for ``wandb sync``."""

    online = "online"
    offline = "offline"


class ProviderKind(StrEnum):
    """cloud.provider: providers/registry.py's PROVIDERS, one each."""

    local = "local"
    skypilot = "skypilot"


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
    # A train function's clock for chaos at_step triggers: "" counts its reports (each
    # ray.train.report is one step, as the run's steps, progress and lost work count
    # them); a metric's name (e.g. epoch) makes at_step N fire at the first report whose
    # metric reaches N. Workload classes count optimizer steps.
    clock: str = ""
    # Built-ins' batch() takes it per worker; a workload's dataset() takes it as the
    # global batch of one optimizer step, split evenly across workers and micro-batches.
    batch_size: int = 64
    # Built-in workloads (digits, synthetic) only; user workloads use job.params.
    lr: float = 0.01
    hidden_size: int = 256
    eval_fraction: float = 0.25


@dataclass
class FsdpConfig:
    """trainer.fsdp: how trainer.strategy=fsdp shards (FSDP2's fully_shard options)."""

    # Free each unit's gathered parameters after its forward pass (less memory, one more
    # all-gather in the backward pass); false keeps them until the backward pass.
    reshard_after_forward: bool = True
    # A mixed-precision policy (GPU only; refused on CPUs): the dtype the gathered
    # parameters compute in; none keeps the parameters' own dtype.
    param_dtype: Precision = Precision.none
    # The dtype gradients are reduced in; none: param_dtype's.
    reduce_dtype: Precision = Precision.none


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
    # ddp: every worker holds the whole model (DistributedDataParallel); fsdp: FSDP2 shards
    # parameters, gradients and optimizer state across the workers (the workload's
    # shard_units(model), default every block of its largest nn.ModuleList, then the root).
    strategy: Strategy = Strategy.ddp
    fsdp: FsdpConfig = field(default_factory=FsdpConfig)
    # units: recompute each shard unit's activations in the backward pass (less memory).
    activation_checkpointing: ActivationCheckpointing = ActivationCheckpointing.none

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
    # USD per node-hour: what a run's cost (result.json's goodput block) counts for this
    # region. Null: the catalog snapshot's price for instance_type (spot where use_spot),
    # unpriced for local and on-prem regions without one.
    hourly_cost: float | None = None
    # Expected losses an hour (spot reclaims, outages) for recovery.placement=cost; the
    # run's own losses in the region update it as it goes.
    preemption_rate_per_h: float = 0.0

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
    # With a control store: where the controller finds the user's key from which the run's
    # secret is derived, so that another machine given it can take the run over (env:VARNAME,
    # file:PATH or cmd:COMMAND; recovery/controlkey.py). Unset variable: no key,
    # a random secret, and only this machine can resume the run.
    control_key: str = "env:ORCHESTRATOR_CONTROL_KEY"
    # Each cluster's Ray dashboard, bound to 127.0.0.1 on the head (the cluster's own
    # machine: reach a cloud's through ssh -L); its URL is printed and journaled.
    # false: no dashboard (the processes and the CPU it takes are left out).
    dashboard: bool = False
    # true: the orchestrator starts, on 127.0.0.1 and free ports, an S3 (moto) or GCS
    # (fake-gcs-server) server for each s3:// or gs:// region with no
    # storage_options.endpoint_url, with its bucket and dummy credentials, and stops it
    # when the controller ends (the localstores extra); see conf/cloud/local_cloudstores.yaml.
    local_servers: bool = False


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
class TrialConfig:
    """hpo.trial: what each trial of a search trains on."""

    # 1: the trial trains in its Tune trial's process (a world of one, hpo.cpus_per_trial
    # CPUs), unless job.train_func or data.loader=ray_data make it a Ray Train run of one
    # worker. More: each trial is a Ray Train run of this many DDP workers, each with the
    # CPUs and GPUs below, as a run's workers are (the batch splits across them).
    workers: int = 1
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0


@dataclass
class HpoConfig:
    # A Ray Tune search over the job instead of one training run.
    enabled: bool = False
    # Any metric the workload's evaluate() returns (or a train function reports).
    metric: str = "accuracy"
    mode: Mode = Mode.max
    num_samples: int = 6
    max_concurrent: int = 2
    cpus_per_trial: float = 1.0
    trial: TrialConfig = field(default_factory=TrialConfig)
    scheduler: Scheduler = Scheduler.asha
    # random: trials drawn up front from job.seed (grid keys too); optuna: Optuna's TPE
    # proposes each trial from the results so far (pip install '.[search]').
    search_alg: SearchAlg = SearchAlg.random
    # hpo.scheduler=pbt: every this many iterations a trial in the bottom quantile_fraction
    # takes a top trial's newest checkpoint and goes on with its values perturbed.
    perturbation_interval: int = 2
    quantile_fraction: float = 0.25
    # The search keys PBT perturbs; the others a trial takes from its donor as they are (a
    # checkpoint's shapes must fit). Empty: every key of non-integer values (rates, norms).
    mutate: list[str] = field(default_factory=list)
    # Trial iterations (one iteration = steps_per_iteration training steps, then an evaluation
    # and a checkpoint); ASHA stops trials at rungs grace_period * reduction_factor**k.
    max_t: int = 6
    grace_period: int = 2
    reduction_factor: int = 2
    steps_per_iteration: int = 20
    # {config path: "distribution numbers..."}, e.g. {job.params.hidden: "choice 32 64",
    # job.lr: "loguniform 0.01 0.2"}; a nested mapping is read as paths (lr, hidden_size and
    # batch_size alone mean job.<key>); distributions: choice, grid, uniform, quniform,
    # loguniform, qloguniform, randint (orchestrator/hpo/space.py).
    search_space: dict[str, Any] = field(default_factory=dict)
    # At most one snapshot of the experiment (its state, and the trial checkpoints that moved) per this many seconds.
    snapshot_interval_s: float = 1.0
    # A trial that ends hands its process (torch and the workload imported) to the next
    # trial, which seeds and builds its own (Tune's reuse_actors): auto where that process
    # runs no user code (a built-in workload, or Ray Train trials), on (a workload that
    # keeps no state at module level), or off (each trial a new process).
    reuse_processes: ReuseProcesses = ReuseProcesses.auto


@dataclass
class RecoveryConfig:
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 10.0
    max_failovers: int = 2
    # In-place restarts after the workload raised; the same error again in the same step
    # ends the run at once (a bug), whatever is left of these.
    max_restarts_on_errors: int = 1
    # Preemption notices survived (spot reclaims): a budget of their own.
    max_preemptions: int = 10
    provision_timeout_s: float = 60.0
    # A region that failed within this many seconds is skipped when choosing the next.
    region_cooldown_s: float = 600.0
    # Keep the next region's cluster up with the runtime waiting (faster failover, twice the clusters).
    standby: bool = False
    # Share one warm cluster per region with every run naming this pool (held through
    # cloud.control_store, sealed with the control key); null: none.
    standby_pool: str | None = None
    # Hedged provisioning: at the first sign of trouble (no heartbeat for hedge_after_s, a
    # preemption notice), the cluster a failover would take is launched, its runtime up and
    # waiting, before the loss is declared; torn down if the region answers again. At most
    # this many such launches a run (each can cost a cluster from the sign to the verdict);
    # 0: no hedging.
    hedge_max_launches: int = 0
    # A heartbeat older than this is a sign of trouble; 0: two and a half heartbeat
    # intervals (at most half of heartbeat_timeout_s).
    hedge_after_s: float = 0.0
    # A detached run's supervisor resumes a controller that died abnormally (a signal, an
    # uncaught exception) at most this many times; stop, cancel and the run's end are not deaths.
    controller_restarts: int = 3
    # With a control store: how long a controller's lease on the run holds unrenewed (it is
    # renewed every heartbeat interval); a takeover from another machine waits this long
    # after a controller's host is lost.
    controller_lease_s: float = 30.0
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
    # A lost worker (or node) is replaced while the other workers keep their processes,
    # model and data, and rejoin the re-formed group (auto), or the whole group restarts (off).
    survivors: AutoOff = AutoOff.auto
    # With survivors kept, the committed checkpoint's state comes from the ranks that hold
    # it in memory, checked against its signed manifest (auto), or from the store (off).
    peer_restore: AutoOff = AutoOff.auto
    # Each node keeps a spare worker process, torch and the workload imported, that a lost
    # worker's replacement starts on at once (auto), or a replacement starts a new process
    # (off: no idle process per node, no CPU spent importing it while the group trains).
    spares: AutoOff = AutoOff.auto
    # A search resumed in another region: errored trials continue from their last
    # checkpoint (resume_errored), or start over (restart_errored), or stay errored (both false).
    resume_errored: bool = True
    restart_errored: bool = False
    # Where the run starts and fails over to: listed (cloud.candidates in order) or cost
    # (the candidate with the lowest expected cost to finish: its price, its loss rate, its
    # start-up and restore time, the egress of its checkpoint; journaled with each decision).
    placement: Placement = Placement.listed
    # With placement=cost: losses an hour added to a region that shares its cloud and
    # geography with the region just lost (an outage may take both).
    correlated_rate_per_h: float = 0.5
    # Seconds from the run's start by which it must end; 0: none. While it runs on spot
    # regions (cloud.regions.<r>.use_spot), each launch chooses spot or on-demand by
    # recovery.deadline_policy (recovery/deadline.py), journaled as a capacity event.
    deadline_s: float = 0.0
    deadline_policy: DeadlinePolicy = DeadlinePolicy.uniform_progress


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
    # preempt: the notice's grace period before the machines are reclaimed; kill_region
    # with graceful on the local provider: from its SIGTERM to its SIGKILL.
    grace_s: float = 30.0
    # kill_region: cancelled as an admin's scancel or a machine's shutdown cancels, every
    # process told with SIGTERM and killed once the grace period has passed (on Slurm, a
    # plain scancel: its KillWait), so an upload in flight may still land; false: every
    # process SIGKILLed at once, as a region lost.
    graceful: bool = False
    # status_flap: how many of the provider's health checks in a row fail.
    count: int = 1
    # kill_node / hang_node: which node (1 ..., the head is 0, which kill_head takes);
    # null: one drawn from seed among the cluster's worker nodes of node_role.
    node: int | None = None
    # kill_node / hang_node with no node named: training draws among the worker nodes that
    # run a worker of the group (among all where the ranks' nodes are not known); idle
    # among those that run none (a spare node: refused when there is none).
    node_role: NodeRole = NodeRole.training
    seed: int = 0


@dataclass
class ObjectivesConfig:
    """A chaos run's (or a drilled run's) pass/fail gate, judged as its result is written."""

    # Every incident's recovery time at most this (seconds).
    max_rto_s: float | None = None
    # Every incident's lost steps at most this.
    max_lost_steps: int | None = None
    # A finished run under the same home whose final weights this run must end with.
    exact: str | None = None


@dataclass
class ChaosConfig:
    faults: list[FaultConfig] = field(default_factory=list)
    objectives: ObjectivesConfig = field(default_factory=ObjectivesConfig)
    # Restart a crashed controller with action=resume, as a service manager would
    # (false: leave it to the user, which is what the resume tests exercise).
    supervise: bool = True


# notify.webhook=env:VARNAME: the URL is read from the environment variable VARNAME at the
# run's start, so that it is never typed on a command line (or kept in a shell's history).
NOTIFY_ENV = "env:"
# How a run's config.json names a notify target it does not hold whole: this prefix, then
# what may be shown of it (the webhook's scheme://host[:port], the command's program). The
# whole value is in the run's notify.secret (0600; orchestrator/notify/secret.py).
NOTIFY_KEPT = "notify.secret:"


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
    # Listeners of the run's events, each module:Name (a class or function, importable where
    # the controller runs; job.code_dir is on its path), called with the run (run_id, run_dir,
    # cfg) at its first event; what it returns gets on_event(event, view) for every event the
    # journal takes, and close() at the run's end if it has one. One that raises is journaled
    # once (listener_failed) and the run goes on.
    listeners: list[str] = field(default_factory=list)


@dataclass
class TrackingConfig:
    """An experiment tracker for the run (docs/guides/tracking.md): one tracker run per
    orchestrator run, resumed (never duplicated) after a failover or a takeover."""

    # none, mlflow or wandb. The tracker's client is imported only when one is named (the
    # tracking extra: pip install -e '.[tracking]').
    kind: TrackerKind = TrackerKind.none
    # mlflow: the tracking server (http:// or https://, or file:///a/folder). null: the
    # environment's MLFLOW_TRACKING_URI, else ./mlruns. Never a credential: MLflow reads
    # MLFLOW_TRACKING_TOKEN (or _USERNAME and _PASSWORD) from the environment.
    uri: str | None = None
    # mlflow: the experiment; wandb: the project. null: job.name.
    project: str | None = None
    # wandb: the team or user the project belongs to. null: the API key's default
    # (WANDB_API_KEY, read from the environment by W&B itself).
    entity: str | None = None
    # The tracker run's name. null: the run's run_id.
    run_name: str | None = None
    # Tags on the tracker run, besides the orchestrator's own (orchestrator.*).
    tags: dict[str, str] = field(default_factory=dict)
    # wandb: online, or offline (its files under the run folder's tracking/, for wandb sync).
    mode: TrackerMode = TrackerMode.online
    # How often, in seconds, what is due is sent in one batch: the tracker's cost to the run.
    flush_every_s: float = 5.0


@dataclass
class ConsoleConfig:
    """action=console: the web console on this machine (docs/guides/console.md)."""

    # The port it listens on; 0: a free one, printed in the console's URL.
    port: int = 0
    # The address it binds: this machine alone (loopback) unless you name another; the URL's
    # token still guards every page, over plain HTTP.
    host: str = "127.0.0.1"
    # The stop, cancel and drill buttons; false: no buttons, and their POSTs answer 403.
    actions: bool = True


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
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # action=console's server (this command's, not the run's: no run's journal keeps it).
    console: ConsoleConfig = field(default_factory=ConsoleConfig)
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
    # action=run and resume: start the controller in the background (its own session, its
    # output in the run folder's controller.log) and return once the first attempt starts.
    detach: bool = False
    # action=drill: the fault to inject into the running attempt (a kind of chaos.faults that
    # strikes at once, orchestrator.wire.faults.DRILL_FAULTS), and its region (default: where
    # the run trains).
    fault: str | None = None
    region: str | None = None
    # action=report: also write the run's incidents and objectives as a JUnit XML report here.
    junit: str | None = None

    @property
    def home_path(self) -> str:
        return os.path.abspath(os.path.expanduser(self.home))

    def candidate_regions(self) -> list[str]:
        return list(self.cloud.candidates) or list(self.cloud.regions)


# Keys that shape what this command prints, not the run: the journal's copy of the config
# leaves them out, and a config.json may lack them (one written before format existed).
DISPLAY_KEYS = ("progress", "format", "attempt", "rank", "follow", "show_logs", "detach", "console")
