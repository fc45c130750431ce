"""What the controller tells one attempt's runtime: a JSON file, so it crosses any boundary."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Annotated, Any

from orchestrator.wire.codec import to_plain
from orchestrator.wire.sections import (
    Above,
    AtLeast,
    CheckpointSection,
    DataSection,
    FallbackStore,
    FaultSpec,
    HpoSection,
    JobSection,
    NoticeSection,
    OneOf,
    TrainerSection,
    field_types,
    read,
)
from recovery.boundedjson import CodecError, decode
from recovery.fencing import Lineage

# Every process of a cluster that runs the runtime gets these (the provider sets
# them at launch). Ray Train's defaults suit big clusters: a 1.7 s health poll
# makes every report slow. Set on the cluster, not as a job runtime_env, so the
# workers Ray prestarts can host Train's actors.
TRAIN_ENV = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2",
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    # Ray Train sends a worker's print through its logger as well as to stdout: both land
    # in the rank's log (orchestrator/runtime/loop/rank_log.py), so each line would show twice.
    "RAY_TRAIN_ENABLE_PRINT_PATCH": "0",
    "OMP_NUM_THREADS": "1",
    # Deterministic cuBLAS (exact resume on GPUs); read when CUDA starts, ignored on CPUs.
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
}


@dataclass(frozen=True)
class RuntimeSpec:
    """The controller's orders to one attempt. Built from plain JSON (``load``, or a
    Ray Train worker's config) or by the controller, whose sections may come as plain
    dicts: every field is read against its type here (see ``sections``), so a spec
    that exists is one the runtime can trust, and a bad one is one line naming its key."""

    run_id: str
    generation: Annotated[int, AtLeast(1)]
    region: str
    store_url: str
    control_url: str
    ray_address: str
    ray_storage_path: str
    job: JobSection
    trainer: TrainerSection
    checkpoint: CheckpointSection
    faults: list[FaultSpec] = field(default_factory=list)
    heartbeat_interval_s: Annotated[float, Above(0)] = 1.0
    store_options: dict[str, Any] = field(default_factory=dict)
    # Where to commit when the primary store fails longer than store_outage_s, in order.
    fallback_stores: list[FallbackStore] = field(default_factory=list)
    store_outage_s: Annotated[float, Above(0)] = 15.0
    # A warm standby: start everything, then wait for the controller's activation.
    standby: bool = False
    # data.* (the loader, its shuffle buffer, the synthetic set's shape and cache folder).
    data: DataSection = field(default_factory=DataSection)
    # hpo.* plus recovery.resume_errored / restart_errored when the job is a search; None: train once.
    hpo: HpoSection | None = None
    # The node's local scratch disk (a copy of the newest checkpoint lives there).
    scratch_dir: str | None = None
    # The node's folder where each Ray Train worker appends its stdout and stderr
    # (rank-<R>.log, orchestrator/wire/logfiles.py). None: the workers' output stays Ray's.
    log_dir: str | None = None
    # fsspec options for the control channel (endpoint, timeouts; never credentials).
    control_options: dict[str, Any] = field(default_factory=dict)
    # The controller's fencing lineage when it started this attempt, [[generation,
    # restored_step], ...]: what the runtime may restore (a standby gets a newer one
    # with its activation). None: a spec from before it carried one; the stores' fence decides.
    lineage: list[list[int]] | None = None
    # Where this region's nodes hear of their reclaim (the cloud's instance metadata).
    preemption_notice: NoticeSection = field(default_factory=NoticeSection)
    # The region's Ray nodes (the workers spread over them) and how long a worker group
    # that lost a node waits for its replacement before it goes on with the workers that
    # fit (recovery.node_replace_timeout_s).
    nodes: Annotated[int, AtLeast(1)] = 1
    node_wait_s: Annotated[float, AtLeast(0)] = 60.0
    # recovery.survivors and recovery.peer_restore (orchestrator/runtime/group/rendezvous.py),
    # recovery.spares (orchestrator/runtime/group/spares.py).
    survivors: Annotated[str, OneOf(("auto", "off"))] = "auto"
    peer_restore: Annotated[str, OneOf(("auto", "off"))] = "auto"
    spares: Annotated[str, OneOf(("auto", "off"))] = "auto"
    # The attempt runs on on-demand capacity a deadline chose over the region's spot
    # (recovery.deadline_s): nothing reclaims it, so chaos preempt faults do not strike it.
    on_demand: bool = False

    def __post_init__(self) -> None:
        hints = field_types(RuntimeSpec)
        for f in fields(self):
            # Frozen, and still the place where plain values become typed ones.
            object.__setattr__(self, f.name, read(f.name, getattr(self, f.name), hints[f.name]))
        if self.lineage is None:
            return
        try:
            lineage = Lineage.from_plain(self.lineage)
        except ValueError as exc:
            raise ValueError(f"runtime spec: lineage: {exc}") from None
        if lineage.generation > self.generation:
            raise ValueError(
                f"runtime spec: lineage: reaches generation {lineage.generation}, past this attempt's {self.generation}"
            )

    def fencing_lineage(self) -> Lineage | None:
        return None if self.lineage is None else Lineage.from_plain(self.lineage)

    def to_plain(self) -> dict[str, Any]:
        """The spec as JSON: the file, and a Ray Train worker's config (plain, picklable)."""
        out: dict[str, Any] = to_plain(self)
        return out

    @staticmethod
    def from_plain(plain: Any) -> RuntimeSpec:
        """A spec from its JSON; ValueError (one line, naming the key) when it is not one:
        an unknown key (a newer controller's) or a missing one is refused, as a bad value is."""
        spec: RuntimeSpec = read("", plain, RuntimeSpec)
        return spec

    def dump(self, path: str) -> None:
        from recovery.storage import refuse_secret

        refuse_secret(
            "runtime spec",
            {
                "store_url": self.store_url,
                "store_options": self.store_options,
                "fallback_stores": to_plain(self.fallback_stores),
                "control_url": self.control_url,
                "control_options": self.control_options,
            },
        )
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_plain(), fh, indent=1)

    @staticmethod
    def load(path: str) -> RuntimeSpec:
        with open(path, "rb") as fh:
            data = fh.read()
        try:
            # NaN and Infinity are read, for the field that refuses them to be named.
            plain = decode(data, strict=False)
        except CodecError as exc:
            raise ValueError(f"runtime spec: not JSON we read ({exc})") from None
        return RuntimeSpec.from_plain(plain)
