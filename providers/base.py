"""The Provider interface: launch a cluster in a region, run the runtime, watch it, tear it down."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from orchestrator.wire.logfiles import KeptLogs

# What health() answers, defined beside the rules that read it (re-exported for providers).
from recovery.detection import FailureKind
from recovery.detection import Health as Health
from recovery.detection import HealthCheck as HealthCheck


class ProvisionErrorKind(StrEnum):
    NO_CAPACITY = "no_capacity"  # try the next region
    PRECHECK = "precheck"  # credentials or config: fail fast
    TRANSIENT = "transient"  # worth another try
    # Not up within recovery.provision_timeout_s: the region had its time; the policy moves on.
    TIMEOUT = "timeout"


# What each kind of provisioning error is to the failure policy.
PROVISION_FAILURE = {
    ProvisionErrorKind.NO_CAPACITY: FailureKind.NO_CAPACITY,
    ProvisionErrorKind.PRECHECK: FailureKind.PRECHECK,
    ProvisionErrorKind.TRANSIENT: FailureKind.PROVISION_ERROR,
    ProvisionErrorKind.TIMEOUT: FailureKind.PROVISION_TIMEOUT,
}


class ProvisionError(Exception):
    def __init__(self, kind: ProvisionErrorKind, region: str, message: str) -> None:
        super().__init__(f"region {region}: {message}")
        self.kind = kind
        self.region = region


@dataclass
class RegionSpec:
    name: str
    store: str
    num_cpus: int  # per node
    num_gpus: int = 0  # per node
    nodes: int = 1  # the head and nodes - 1 worker nodes


@dataclass
class ClusterHandle:
    """Enough to find a cluster again, also from another process (it goes in the journal)."""

    name: str
    region: str
    provider: str
    address: str  # the Ray address a driver connects to
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeCheck:
    """How one Ray node of a cluster looks (``Provider.nodes``)."""

    index: int  # 0 is the head; worker nodes 1 ..
    health: Health  # UP; NOT_UP (stopped, or not answering); GONE (its processes ended)
    detail: str = ""


class RuntimeProcess(Protocol):
    pid: int

    def poll(self) -> int | None: ...


class Provider(Protocol):
    name: str

    def launch(
        self, region: RegionSpec, cluster_name: str, timeout_s: float, env: dict[str, str] | None = None
    ) -> ClusterHandle:
        """A ready cluster whose processes all see ``env``, or ProvisionError saying
        whether another region may help."""

    def health(self, cluster: ClusterHandle) -> HealthCheck:
        """How the cluster looks: GONE only when the provider is sure (its record gone or
        terminated, the allocation gone, the head's process ended); NOT_UP when it is not
        UP or the provider could not tell. Never blocks for long: the watch asks often."""

    def start_runtime(
        self, cluster: ClusterHandle, argv: list[str], env: dict[str, str], log_path: str
    ) -> RuntimeProcess:
        """Start the runtime driver where it can reach the cluster; part of the region."""

    def reattach(self, cluster: ClusterHandle, proc: RuntimeProcess) -> RuntimeProcess | None:
        """A new connection to the runtime that ``proc`` ran, now that ``proc`` (the
        connection) ended without the runtime's word; None when the runtime is known
        to be gone, so ``proc``'s status is the runtime's."""

    def processes(self, cluster: ClusterHandle) -> list[int]:
        """Every process of the cluster, the runtime's included (for fault injection)."""

    def nodes(self, cluster: ClusterHandle) -> list[NodeCheck]:
        """Each worker node's health (index >= 1; the head's is ``health``); [] where the
        provider cannot tell one node from another. Never blocks for long. A provider
        that reports nodes labels each Ray node it starts with its index
        (``orchestrator.wire.schema.NODE_LABEL``), so a lost node that ran no rank of the
        group is told from one that did; unlabelled, every lost node counts as a worker's."""

    def node_processes(self, cluster: ClusterHandle, index: int) -> list[int]:
        """Every process of worker node ``index`` on this machine (chaos kill_node,
        hang_node); [] where they are not this machine's."""

    def drop_node(self, cluster: ClusterHandle, index: int) -> None:
        """Worker node ``index`` is lost and not replaced: kill what is left of it (a hung
        node must not wake up and rejoin a group that moved on). A node already gone, or
        one the provider cannot reach, is not an error."""

    def replace_node(self, cluster: ClusterHandle, index: int, timeout_s: float) -> None:
        """Worker node ``index`` anew, joined to the cluster, within ``timeout_s``: what is
        left of the old one is killed first (a hung node must not come back). ProvisionError
        when it cannot (the run then goes on with fewer workers, or fails over), and once
        the cluster is torn down meanwhile (called from a thread of the controller's: what
        it started then is killed, and the cluster is not recorded again)."""

    def keep_logs(self, cluster: ClusterHandle, dest_dir: str) -> KeptLogs:
        """Copy the ranks' log files of the cluster's log folder (``info["log_dir"]``) to
        ``dest_dir`` on this machine, each capped (orchestrator/wire/logfiles.py); called
        before teardown. What cannot be reached is said in ``error``, never raised."""

    def teardown(self, cluster: ClusterHandle) -> None:
        """Leave nothing behind. A cluster that is already gone is not an error."""

    def find(self, cluster_name: str) -> ClusterHandle | None:
        """A cluster this provider launched, from its own records: how a controller
        that lost its memory (a crash mid-launch) finds what to adopt or tear down."""


class KeepsRuntime(Protocol):
    """What a provider adds when a lost cluster leaves its node runtime behind for a launch
    under the same name to reuse (SkyPilot on Slurm). The controller then names a run's
    clusters once per region (orchestrator/control/naming.py) and sweeps what was kept
    when the run ends. Providers without ``keeps_runtime`` get a name per attempt."""

    keeps_runtime: bool

    def teardown(self, cluster: ClusterHandle, keep_runtime: bool = False) -> bool:
        """As ``Provider.teardown``; ``keep_runtime``: leave the runtime for a launch under
        the cluster's name. True when something was left (``sweep_runtime`` removes it)."""

    def in_use(self, cluster_name: str) -> bool:
        """Whether the provider still knows a cluster of that name (a launch under it
        would adopt it); True when it cannot tell."""

    def sweep_runtime(self, cluster: ClusterHandle) -> None:
        """Remove what ``teardown(keep_runtime=True)`` left of ``cluster``."""
