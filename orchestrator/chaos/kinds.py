"""Every fault the chaos suite can inject, and the groups the code asks about. Pure."""

from __future__ import annotations

from enum import StrEnum


class FaultKind(StrEnum):
    KILL_REGION = "kill_region"  # every process of the region's cluster, SIGKILL
    KILL_WORKER = "kill_worker"  # one training worker (Ray Train restarts it in place)
    KILL_HEAD = "kill_head"  # the cluster's head: the region is lost
    HANG_REGION = "hang_region"  # SIGSTOP the cluster: no heartbeat, no exit
    PARTITION = "partition"  # the runtime cannot reach the control channel
    PARTITION_REGION = "partition_region"  # nor its store: a zombie keeps training
    PREEMPT = "preempt"  # a preemption notice: checkpoint, stop, resume elsewhere
    CONTROLLER_CRASH = "controller_crash"  # SIGKILL to the controller; action=resume goes on
    CORRUPT_CHECKPOINT = "corrupt_checkpoint"  # a byte flipped in the newest checkpoint
    USER_ERROR = "user_error"  # the workload raises
    DISK_FULL = "disk_full"  # the scratch filesystem fills up
    STORAGE_OUTAGE = "storage_outage"  # the store refuses connections
    STORAGE_HANG = "storage_hang"  # the store accepts and never answers
    STORAGE_SLOW = "storage_slow"  # the store answers slowly
    TORN_CHECKPOINT = "torn_checkpoint"  # an upload cut mid-way


FAULT_KINDS = tuple(FaultKind)
STORAGE_FAULTS = (
    FaultKind.STORAGE_OUTAGE,
    FaultKind.STORAGE_HANG,
    FaultKind.STORAGE_SLOW,
    FaultKind.TORN_CHECKPOINT,
)
# Faults whose time is the failure's time, when one of them ended the attempt.
REGION_FAULTS = (
    FaultKind.KILL_REGION,
    FaultKind.KILL_HEAD,
    FaultKind.HANG_REGION,
    FaultKind.PARTITION,
    FaultKind.PARTITION_REGION,
    FaultKind.PREEMPT,
)
# A search has no train-loop rendezvous of a worker: only faults that take a whole region apply.
SEARCH_FAULTS = (FaultKind.KILL_REGION, FaultKind.HANG_REGION, FaultKind.PARTITION_REGION)

# Triggers: a step (exact, through the runtime's rendezvous), or a point. Runtime-side
# points are met by the runtime; controller-side ones by the controller itself.
STEP_TRIGGERS = ("at_step", "random")
RUNTIME_POINTS = ("checkpoint_upload", "restore")
CONTROLLER_POINTS = ("provisioning", "failover")
DURING = (*RUNTIME_POINTS, *CONTROLLER_POINTS)
# What can happen at a controller-side point, where no runtime is training yet.
AT_POINT = {
    "provisioning": (
        FaultKind.KILL_REGION,
        FaultKind.KILL_HEAD,
        FaultKind.CONTROLLER_CRASH,
        FaultKind.CORRUPT_CHECKPOINT,
        *STORAGE_FAULTS,
    ),
    "failover": (FaultKind.CONTROLLER_CRASH, FaultKind.CORRUPT_CHECKPOINT, *STORAGE_FAULTS),
}
