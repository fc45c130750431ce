"""Every fault the chaos suite can inject, and the groups the code asks about. Pure."""

from __future__ import annotations

from enum import StrEnum


# Member names equal their values: OmegaConf reads an enum-typed config field by member
# name, so "kill_region" in a YAML file or on the command line must name a member.
class FaultKind(StrEnum):
    kill_region = "kill_region"  # every process of the region's cluster, SIGKILL
    kill_worker = "kill_worker"  # one training worker (Ray Train restarts it in place)
    kill_head = "kill_head"  # the cluster's head: the region is lost
    hang_region = "hang_region"  # SIGSTOP the cluster: no heartbeat, no exit
    partition = "partition"  # the runtime cannot reach the control channel
    partition_region = "partition_region"  # nor its store: a zombie keeps training
    preempt = "preempt"  # a preemption notice: checkpoint, stop, resume elsewhere
    controller_crash = "controller_crash"  # SIGKILL to the controller; action=resume goes on
    controller_host_loss = "controller_host_loss"  # SIGKILL to the controller, its run folder deleted
    controller_freeze = "controller_freeze"  # SIGSTOP the controller for duration_s, then SIGCONT
    corrupt_checkpoint = "corrupt_checkpoint"  # a byte flipped in the newest checkpoint
    user_error = "user_error"  # the workload raises
    disk_full = "disk_full"  # the scratch filesystem fills up
    storage_outage = "storage_outage"  # the store refuses connections
    storage_hang = "storage_hang"  # the store accepts and never answers
    storage_slow = "storage_slow"  # the store answers slowly
    torn_checkpoint = "torn_checkpoint"  # an upload cut mid-way
    status_flap = "status_flap"  # the provider's health check fails `count` times, the cluster fine
    ssh_drop = "ssh_drop"  # the controller's connection to the runtime is cut; the runtime lives
    kill_node = "kill_node"  # every process of one worker node (not the head), SIGKILL
    hang_node = "hang_node"  # SIGSTOP one worker node: its workers stall, its processes stay
    corrupt_peer_state = "corrupt_peer_state"  # a byte flipped in the workers' in-memory checkpoint copies


FAULT_KINDS = tuple(FaultKind)
STORAGE_FAULTS = (
    FaultKind.storage_outage,
    FaultKind.storage_hang,
    FaultKind.storage_slow,
    FaultKind.torn_checkpoint,
)
# Faults whose time is the failure's time, when one of them ended the attempt.
REGION_FAULTS = (
    FaultKind.kill_region,
    FaultKind.kill_head,
    FaultKind.hang_region,
    FaultKind.partition,
    FaultKind.partition_region,
    FaultKind.preempt,
)
# Faults action=drill injects into a running attempt: the ones the controller carries out
# alone, at once (no rendezvous with a worker, no proxy or mount set up when the run began);
# kill_worker strikes the last rank the group's train_started named (its worker_pids).
DRILL_FAULTS = (
    *REGION_FAULTS,
    FaultKind.kill_worker,
    FaultKind.kill_node,
    FaultKind.hang_node,
    FaultKind.corrupt_checkpoint,
    FaultKind.status_flap,
    FaultKind.ssh_drop,
)
# Faults that strike the controller itself.
CONTROLLER_FAULTS = (FaultKind.controller_crash, FaultKind.controller_host_loss, FaultKind.controller_freeze)
# Of those, the ones whose way back is the control store's mirror and lease.
TAKEOVER_FAULTS = (FaultKind.controller_host_loss, FaultKind.controller_freeze)
# Faults that strike one worker node of a multi-node cluster (chaos.faults[i].node).
NODE_FAULTS = (FaultKind.kill_node, FaultKind.hang_node)
# A search has no train-loop rendezvous of a worker: faults that take a whole region apply,
# and a corrupt checkpoint (of a trial its newest snapshot names, which a resume reads).
SEARCH_REGION_FAULTS = (FaultKind.kill_region, FaultKind.hang_region, FaultKind.partition_region)
SEARCH_FAULTS = (*SEARCH_REGION_FAULTS, FaultKind.corrupt_checkpoint)

# Triggers: a step (exact, through the runtime's rendezvous), or a point. Runtime-side
# points are met by the runtime; controller-side ones by the controller itself.
STEP_TRIGGERS = ("at_step", "random")


class NodeRole(StrEnum):
    """Which worker node a drawn kill_node or hang_node strikes (chaos.faults[i].node_role)."""

    training = "training"  # one that runs a worker of the group (any, where none is known)
    idle = "idle"  # one that runs none: a spare node, idle capacity


class During(StrEnum):
    checkpoint_upload = "checkpoint_upload"
    restore = "restore"
    provisioning = "provisioning"
    failover = "failover"


RUNTIME_POINTS = (During.checkpoint_upload, During.restore)
CONTROLLER_POINTS = (During.provisioning, During.failover)
DURING = tuple(During)
# What can happen at a controller-side point, where no runtime is training yet.
AT_POINT = {
    During.provisioning: (
        FaultKind.kill_region,
        FaultKind.kill_head,
        FaultKind.controller_crash,
        FaultKind.corrupt_checkpoint,
        *STORAGE_FAULTS,
    ),
    During.failover: (FaultKind.controller_crash, FaultKind.corrupt_checkpoint, *STORAGE_FAULTS),
}
