"""The runtime spec's sections, typed: what the runtime reads of the run's config.

Each section mirrors a config dataclass of the controller's (``orchestrator/config/schema.py``:
JobConfig, TrainerConfig, ...) field for field, with the same defaults, but is not
imported from there: the config is the controller's, and the wire imports neither side.
``tests/unit/test_spec_sections.py`` holds the two in step.

A section is built from the plain JSON the controller wrote (``from_plain``) and checked
on the way in, as anything that crosses a boundary: every value of its field's type
(a bool is not an integer, numbers are finite, integers within int64), closed sets
closed, ranges kept, no key this runtime does not read (a newer controller's spec is
refused by name rather than half understood), and no required key missing. A bad one
raises ValueError, one line that names the key: ``runtime spec: job.steps: ...``.
``to_plain`` gives the JSON back, key for key.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from enum import Enum, StrEnum
from typing import Annotated, Any, TypeVar

from orchestrator.wire.codec import (
    read_bool,
    read_choice,
    read_dict,
    read_float,
    read_int,
    read_list,
    read_str,
    show,
    to_plain,
)

# Pure vocabulary that both sides share (a leaf module): the wire may import it.
from orchestrator.wire.faults import DURING, FaultKind, NodeRole
from recovery.boundedjson import CodecError


# The closed sets of the config that cross to the cluster (the config types its fields
# with these). Member names equal their values: OmegaConf reads an enum-typed field by
# member name, and a StrEnum member compares equal to its value.
class Autocast(StrEnum):
    none = "none"
    auto = "auto"  # bf16 on a GPU that has it, none elsewhere
    bf16 = "bf16"
    fp16 = "fp16"


class Strategy(StrEnum):
    ddp = "ddp"  # every worker holds the whole model; gradients all-reduced
    fsdp = "fsdp"  # FSDP2: parameters, gradients and optimizer state sharded across workers


class Precision(StrEnum):
    """trainer.fsdp.param_dtype / reduce_dtype: none keeps the parameters' own dtype."""

    none = "none"
    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"


class ActivationCheckpointing(StrEnum):
    none = "none"
    units = "units"  # each shard unit's activations recomputed in the backward pass


class Loader(StrEnum):
    sharded = "sharded"
    ray_data = "ray_data"


class Mode(StrEnum):
    max = "max"
    min = "min"


class Scheduler(StrEnum):
    asha = "asha"
    fifo = "fifo"
    pbt = "pbt"


class ReuseProcesses(StrEnum):
    """hpo.reuse_processes: whether a trial that ends hands its process to the next one.
    auto: where the trial's process runs no user code (a built-in workload, or a Ray Train
    trial, whose workers are new processes each time); on: always; off: never."""

    auto = "auto"
    on = "on"
    off = "off"


class SearchAlg(StrEnum):
    """How a search picks its trials: drawn up front from job.seed (random, grid keys
    included), or proposed from the results so far by Optuna's TPE (optuna)."""

    random = "random"
    optuna = "optuna"


class NoticeSource(StrEnum):
    """Where a node hears of its reclaim ahead of it (README "Preemption notices")."""

    none = "none"
    aws = "aws"  # IMDSv2: spot/instance-action
    gcp = "gcp"  # the metadata server: instance/preempted


DATA_LOADERS = tuple(str(x) for x in Loader)
AUTOCAST = tuple(str(x) for x in Autocast)
STRATEGIES = tuple(str(x) for x in Strategy)
PRECISIONS = tuple(str(x) for x in Precision)
ACTIVATION_CHECKPOINTING = tuple(str(x) for x in ActivationCheckpointing)
# A metric a search optimises: any name the workload's evaluate() (or the function's
# report) gives, as a TensorBoard tag or a Python identifier spells it.
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]{0,63}")
HPO_MODES = tuple(str(x) for x in Mode)
HPO_SCHEDULERS = tuple(str(x) for x in Scheduler)
HPO_SEARCH_ALGS = tuple(str(x) for x in SearchAlg)
HPO_REUSE = tuple(str(x) for x in ReuseProcesses)
NOTICE_SOURCES = tuple(str(x) for x in NoticeSource)
# numpy's seeds are 32-bit unsigned.
MAX_SEED = 2**32 - 1


# --- what a field's annotation may say beyond its type ------------------------------------------
@dataclass(frozen=True)
class AtLeast:
    low: float

    def check(self, value: float) -> str | None:
        return None if value >= self.low else f"expected >= {self.low}"


@dataclass(frozen=True)
class Above:
    low: float

    def check(self, value: float) -> str | None:
        return None if value > self.low else f"expected > {self.low}"


@dataclass(frozen=True)
class AtMost:
    high: float

    def check(self, value: float) -> str | None:
        return None if value <= self.high else f"expected <= {self.high}"


@dataclass(frozen=True)
class OneOf:
    allowed: tuple[str, ...]

    def check(self, value: str) -> str | None:
        return None if value in self.allowed else f"allowed: {', '.join(self.allowed)}"


@dataclass(frozen=True)
class Named:
    pattern: re.Pattern[str]

    def check(self, value: str) -> str | None:
        return None if self.pattern.fullmatch(value) else f"expected a name matching {self.pattern.pattern}"


Count = Annotated[int, AtLeast(1)]
NonNegativeInt = Annotated[int, AtLeast(0)]
Positive = Annotated[float, Above(0)]
NonNegative = Annotated[float, AtLeast(0)]
Seed = Annotated[int, AtLeast(0), AtMost(MAX_SEED)]


# --- the sections --------------------------------------------------------------------------------
S = TypeVar("S", bound="Section")


class Section:
    """A frozen dataclass read from and written to plain JSON."""

    # Where it sits in the spec (the error messages' key).
    KEY: typing.ClassVar[str] = ""

    @classmethod
    def from_plain(cls: type[S], plain: Any, key: str | None = None) -> S:
        out: S = read(key or cls.KEY, plain, cls)
        return out

    def to_plain(self) -> dict[str, Any]:
        return to_plain(self)


@dataclass(frozen=True)
class JobSection(Section):
    KEY = "job"
    name: str
    workload: str = ""
    train_func: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    code_dir: str = ""
    steps: Count = 300
    seed: Seed = 0
    clock: str = ""
    batch_size: Count = 64
    lr: Positive = 0.01
    hidden_size: Count = 256
    eval_fraction: Annotated[float, Above(0), AtMost(1)] = 0.25


@dataclass(frozen=True)
class FsdpSection(Section):
    KEY = "trainer.fsdp"
    reshard_after_forward: bool = True
    param_dtype: Annotated[str, OneOf(PRECISIONS)] = "none"
    reduce_dtype: Annotated[str, OneOf(PRECISIONS)] = "none"


@dataclass(frozen=True)
class TrainerSection(Section):
    KEY = "trainer"
    workers: Count = 2
    # 0: workers (no elasticity); see orchestrator/config/schema.py.
    min_workers: NonNegativeInt = 0
    cpus_per_worker: Positive = 1.0
    gpus_per_worker: NonNegative = 0.0
    max_worker_restarts: NonNegativeInt = 3
    grad_accum_steps: Count = 1
    grad_clip_norm: NonNegative = 0.0
    autocast: Annotated[str, OneOf(AUTOCAST)] = "none"
    torch_threads: Count = 1
    strategy: Annotated[str, OneOf(STRATEGIES)] = "ddp"
    fsdp: FsdpSection = field(default_factory=FsdpSection)
    activation_checkpointing: Annotated[str, OneOf(ACTIVATION_CHECKPOINTING)] = "none"


@dataclass(frozen=True)
class CheckpointSection(Section):
    KEY = "checkpoint"
    interval_steps: Count = 20
    keep_last: Count = 3
    async_upload: bool = True


@dataclass(frozen=True)
class DataSection(Section):
    KEY = "data"
    loader: Annotated[str, OneOf(DATA_LOADERS)] = "sharded"
    shuffle_buffer_rows: Count = 2048
    samples: Count = 200_000
    features: Count = 256
    # Resolved by the controller (its home's data folder when the config leaves it empty).
    cache_dir: str = ""


@dataclass(frozen=True)
class TrialSection(Section):
    """hpo.trial: each trial's Ray Train workers (1: the trial trains in its own process)."""

    KEY = "hpo.trial"
    workers: Count = 1
    cpus_per_worker: Positive = 1.0
    gpus_per_worker: NonNegative = 0.0


@dataclass(frozen=True)
class HpoSection(Section):
    """hpo.* plus recovery.resume_errored / restart_errored (what happens to errored trials)."""

    KEY = "hpo"
    enabled: bool = False
    metric: Annotated[str, Named(METRIC_NAME)] = "accuracy"
    mode: Annotated[str, OneOf(HPO_MODES)] = "max"
    num_samples: Count = 6
    max_concurrent: Count = 2
    cpus_per_trial: Positive = 1.0
    trial: TrialSection = field(default_factory=TrialSection)
    scheduler: Annotated[str, OneOf(HPO_SCHEDULERS)] = "asha"
    search_alg: Annotated[str, OneOf(HPO_SEARCH_ALGS)] = "random"
    perturbation_interval: Count = 2
    quantile_fraction: Annotated[float, Above(0), AtMost(0.5)] = 0.25
    mutate: list[str] = field(default_factory=list)
    max_t: Count = 6
    grace_period: Count = 2
    reduction_factor: Annotated[int, AtLeast(2)] = 2
    steps_per_iteration: Count = 20
    search_space: dict[str, str] = field(default_factory=dict)
    snapshot_interval_s: NonNegative = 1.0
    reuse_processes: Annotated[str, OneOf(HPO_REUSE)] = "auto"
    resume_errored: bool = True
    restart_errored: bool = False


@dataclass(frozen=True)
class RandomTrigger(Section):
    KEY = "random"
    rate: Annotated[float, Above(0), AtMost(1)]
    seed: Seed = 0


@dataclass(frozen=True)
class FaultSpec(Section):
    """A chaos fault (chaos.faults[i]): its kind, its trigger, and how it lands."""

    KEY = "faults"
    kind: FaultKind
    at_step: Count | None = None
    after_s: Positive | None = None
    during: Annotated[str, OneOf(DURING)] | None = None
    random: RandomTrigger | None = None
    repeat: Count = 1
    region: str | None = None
    duration_s: NonNegative = 0.0
    latency_ms: NonNegative = 0.0
    bandwidth_kbps: NonNegative = 0.0
    grace_s: Positive = 30.0
    # kill_region: a cancel with a grace period (SIGTERM, then SIGKILL), not a loss at once.
    graceful: bool = False
    count: Count = 1
    # kill_node / hang_node: the node's index (1 ..., the head is 0); None: drawn from seed
    # among the worker nodes of node_role.
    node: Count | None = None
    node_role: NodeRole = NodeRole.training
    seed: NonNegativeInt = 0


@dataclass(frozen=True)
class NoticeSection(Section):
    """The region's preemption notice (cloud.regions.<name>.preemption_notice and
    .preemption_notice_url), resolved by the controller: auto is never sent."""

    KEY = "preemption_notice"
    source: Annotated[str, OneOf(NOTICE_SOURCES)] = "none"
    # The metadata service's base URL, http://host[:port][/prefix]; empty: the cloud's own.
    url: str = ""

    def __post_init__(self) -> None:
        if self.url and not self.url.startswith("http://"):
            _fail(f"{self.KEY}.url", self.url, "expected http://host[:port] (the metadata service speaks plain http)")


@dataclass(frozen=True)
class FallbackStore(Section):
    """A store to commit to when the primary one fails (the next regions', in order)."""

    KEY = "fallback_stores"
    region: str
    url: str
    # fsspec options (endpoint, timeouts; never credentials: the spec refuses them).
    options: dict[str, Any] = field(default_factory=dict)


# --- reading plain JSON against an annotation ----------------------------------------------------
T = TypeVar("T")


def read(key: str, value: Any, hint: Any) -> Any:
    """``value`` (plain JSON, or already of its type) as ``hint`` says; ValueError naming ``key``."""
    if typing.get_origin(hint) is Annotated:
        base, *marks = typing.get_args(hint)
        out = read(key, value, base)
        for mark in marks:
            if out is not None and (why := mark.check(out)) is not None:
                _fail(key, value, why)
        return out
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        if value is None:
            return None
        # The spec's unions are all ``X | None``.
        return read(key, value, next(a for a in typing.get_args(hint) if a is not type(None)))
    if hint is Any:
        return value
    if isinstance(hint, type) and is_dataclass(hint):
        return value if isinstance(value, hint) else _read_dataclass(key, value, hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    try:
        if origin is dict:
            return {k: read(_at(key, _key(k)), v, args[1]) for k, v in read_dict(value).items()}
        if origin is list:
            return [read(f"{key}[{i}]", v, args[0]) for i, v in enumerate(read_list(value))]
        reader = _READERS.get(hint)
        if reader is not None:
            return reader(value)
        if isinstance(hint, type) and issubclass(hint, Enum):
            return read_choice(value, "", hint)
    except CodecError as exc:
        _fail(key, value, f"expected {exc.expected}")
    raise TypeError(f"{key}: no reader for {hint!r}")  # a field this module declared wrongly


# A JSON writer gives 1.0 as 1: a float field takes an integer, as a float.
_READERS: dict[Any, typing.Callable[[Any], Any]] = {
    bool: read_bool,
    int: read_int,
    float: read_float,
    str: read_str,
}


def _read_dataclass(key: str, value: Any, cls: type[T]) -> T:
    if not isinstance(value, dict):
        _fail(key, value, "expected a mapping")
    known = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    unknown = next((k for k in value if k not in known), None)
    if unknown is not None:
        # A newer controller's key: refused by name, not half understood.
        raise ValueError(f"runtime spec: {_at(key, _key(unknown))}: unknown key; this runtime reads {', '.join(known)}")
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in value and f.default is MISSING and f.default_factory is MISSING:
            raise ValueError(f"runtime spec: {_at(key, f.name)}: missing (required)")
    hints = field_types(cls)
    return cls(**{name: read(_at(key, name), v, hints[name]) for name, v in value.items()})


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """A dataclass's field annotations, resolved (``Annotated`` marks kept)."""
    return typing.get_type_hints(cls, include_extras=True)


def _fail(key: str, value: Any, why: str) -> typing.NoReturn:
    raise ValueError(f"runtime spec: {key or 'the file'}: got {show(value)}; {why}")


def _at(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def _key(name: Any) -> str:
    return show(name)[1:-1] if isinstance(name, str) else show(name)
