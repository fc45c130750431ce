"""The Provider interface: launch a cluster in a region, run the runtime, watch it, tear it down.

The contract has two parts. ``Provider``: what every provider implements (a provider that
cannot do one of them says so in the way its docstring gives). ``Capability``: what a
provider may add, declared in its ``capabilities`` class attribute; the controller, chaos
and the config's checks read that declaration and never probe a provider for a method.
The conformance suite (tests/support/conformance.py) checks a provider against both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from orchestrator.wire.faults import FaultKind
from orchestrator.wire.logfiles import KeptLogs

# What health() answers, defined beside the rules that read it (re-exported for providers).
from recovery.detection import FailureKind
from recovery.detection import Health as Health
from recovery.detection import HealthCheck as HealthCheck

if TYPE_CHECKING:
    from orchestrator.config.schema import Config


class Capability(StrEnum):
    """What a provider can do beyond ``Provider``'s methods (``Provider.capabilities``)."""

    # Its clusters run on this machine: the pids processes() and node_processes() give
    # are the clusters' own processes (the runtime's among them), which chaos signals, and
    # the files a cluster's info names (its log_dir) are on this machine's disk.
    LOCAL_PROCESSES = "local_processes"
    # nodes() tells a cluster's worker nodes apart, each with its health (without: []).
    NODES = "nodes"
    # replace_node() starts a lost worker node anew (without: ProvisionError NO_CAPACITY).
    REPLACE_NODE = "replace_node"
    # kill_worker(): one worker, named by the runtime, killed where it runs (KillsWorker).
    KILL_WORKER = "kill_worker"
    # kill_cluster(): every process of a cluster killed where it runs, its machines
    # given back: chaos kill_region where the cluster is not on this machine (KillsCluster).
    KILL_CLUSTER = "kill_cluster"
    # freeze_cluster() / thaw_cluster(): every process of a cluster stopped where it runs,
    # then continued: chaos hang_region and partition_region off this machine (FreezesCluster).
    FREEZE_CLUSTER = "freeze_cluster"
    # cut_connection(): the controller's connections to the runtime cut, the runtime
    # untouched (CutsConnection).
    CUT_CONNECTION = "cut_connection"
    # use_token_key(): each cluster's Ray token derived from the run's secret, so that a
    # resumed controller has the token of every cluster it finds again (UsesTokenKey).
    TOKEN_KEY = "token_key"
    # A lost cluster's node runtime is left for a launch under the same name (KeepsRuntime).
    KEEPS_RUNTIME = "keeps_runtime"
    # A cluster one controller launched can be watched, used and torn down by another
    # given only its handle (nothing of it derived from the launching run's secret):
    # what a standby pool (recovery.standby_pool) hands from one run to another.
    SHARED_CLUSTERS = "shared_clusters"


# The methods a capability adds to Provider's: a provider that declares it has them.
CAPABILITY_METHODS: dict[Capability, tuple[str, ...]] = {
    Capability.KILL_WORKER: ("kill_worker",),
    Capability.KILL_CLUSTER: ("kill_cluster",),
    Capability.FREEZE_CLUSTER: ("freeze_cluster", "thaw_cluster"),
    Capability.CUT_CONNECTION: ("cut_connection",),
    Capability.TOKEN_KEY: ("use_token_key",),
    Capability.KEEPS_RUNTIME: ("in_use", "sweep_runtime"),
}

_LOCAL = frozenset({Capability.LOCAL_PROCESSES})
# What each fault that acts through the provider needs of it: any one of the sets, every
# capability in it. Faults not here need nothing of a provider (a store's, the
# controller's, the workload's own, a health check failed by the injector).
FAULT_NEEDS: dict[FaultKind, tuple[frozenset[Capability], ...]] = {
    # Signals to the cluster's processes, or the runtime's, on this machine.
    FaultKind.kill_region: (_LOCAL, frozenset({Capability.KILL_CLUSTER})),
    FaultKind.kill_head: (_LOCAL,),
    FaultKind.hang_region: (_LOCAL, frozenset({Capability.FREEZE_CLUSTER})),
    FaultKind.partition: (_LOCAL,),
    FaultKind.partition_region: (_LOCAL, frozenset({Capability.FREEZE_CLUSTER})),
    FaultKind.preempt: (_LOCAL,),
    FaultKind.torn_checkpoint: (_LOCAL,),  # the region killed once an upload is caught half way
    FaultKind.disk_full: (_LOCAL,),  # a tmpfs mounted here, over the cluster's scratch folder
    # The runtime's pid signalled here, or the provider kills it where it runs.
    FaultKind.kill_worker: (_LOCAL, frozenset({Capability.KILL_WORKER})),
    FaultKind.kill_node: (frozenset({Capability.NODES, Capability.LOCAL_PROCESSES}),),
    FaultKind.hang_node: (frozenset({Capability.NODES, Capability.LOCAL_PROCESSES}),),
    FaultKind.ssh_drop: (frozenset({Capability.CUT_CONNECTION}),),
}


def _needs_text(options: Iterable[frozenset[Capability]]) -> str:
    return " or ".join(" and ".join(sorted(option)) for option in options)


def lacks(what: str, needs: Iterable[frozenset[Capability]] | Capability, provider: str) -> str:
    """The one line refusing ``what`` (a fault, an act) on ``provider``, which lacks what it
    ``needs`` (a capability, or FAULT_NEEDS's alternatives)."""
    options = [frozenset({needs})] if isinstance(needs, Capability) else list(needs)
    noun = "capabilities" if len(options) > 1 or any(len(option) > 1 for option in options) else "capability"
    return f"{what} needs the provider {noun} {_needs_text(options)}, which provider {provider} lacks"


def fault_refusal(kind: str, provider: str, capabilities: frozenset[Capability]) -> str | None:
    """Why fault ``kind`` cannot strike a cluster of ``provider`` (one line), or None."""
    try:
        options = FAULT_NEEDS.get(FaultKind(kind), ())
    except ValueError:
        return None  # not a fault kind: the config's own checks say so
    if not options or any(option <= capabilities for option in options):
        return None
    return lacks(str(kind), options, provider)


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


class ProviderUnavailable(Exception):
    """The provider cannot work on this machine at all (its SDK is not installed): one
    line saying what to install. Raised by ``precheck`` and ``plan``."""


@dataclass(frozen=True)
class Plan:
    """What ``action=plan`` prints of a provider's placements, under the plan's header.

    ``lines``: to stdout, in order; ``errors``: one line each to stderr, a region that
    cannot run the job (the plan then fails); ``files``: path -> text, what a launch
    would use (written, under the plan's folder, before anything is printed)."""

    lines: tuple[str, ...]
    errors: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)


@dataclass
class RegionSpec:
    name: str
    store: str
    num_cpus: int  # per node
    num_gpus: int = 0  # per node
    nodes: int = 1  # the head and nodes - 1 worker nodes
    # Spot capacity or not; None: as the region's config says (use_spot). False: on-demand,
    # chosen over the region's spot by a deadline (recovery.deadline_s).
    spot: bool | None = None


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
    # What it adds to these methods (Capability): on the class, so that a run's faults are
    # checked against it before a provider is made (providers.registry.check_faults).
    capabilities: ClassVar[frozenset[Capability]]

    def precheck(self, regions: list[str]) -> None:
        """Whether the provider can launch in ``regions`` (the run's candidates, in order)
        from this machine: its SDK, credentials, reachability, checked before anything is
        written or launched, in seconds at most. ProvisionError(PRECHECK) naming the region
        that cannot; ProviderUnavailable when none can. Launches nothing."""

    def plan(self, cfg: Config, run_id: str, out_dir: str) -> Plan:
        """What run ``run_id`` of ``cfg`` would start, region by region in failover order,
        and what it would cost; ``out_dir``: where the files of ``Plan.files`` go. Launches
        nothing and writes nothing itself; ProviderUnavailable when it cannot plan here."""

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


class KillsWorker(Protocol):
    """Capability.KILL_WORKER: for a provider whose workers run on other machines, where a
    pid the runtime names cannot be signalled from here (chaos kill_worker)."""

    def kill_worker(self, cluster: ClusterHandle, pid: int) -> str | None:
        """SIGKILL ``pid`` where the cluster runs if it is one of the cluster's processes
        there; None once killed, else why not (one line). Never raises."""


class KillsCluster(Protocol):
    """Capability.KILL_CLUSTER: chaos kill_region for a provider whose clusters run on
    other machines (SkyPilot on Slurm: the allocation SIGKILLed and cancelled)."""

    def kill_cluster(self, cluster: ClusterHandle, graceful: bool = False) -> str | None:
        """Every process of the cluster killed where it runs, and its machines given back;
        None once it is gone, else why not (one line). Never raises. ``graceful``: the
        cancel is sent (SIGTERM, SIGKILL after the platform's grace period) and None
        returned at once, the processes still finishing what they were doing."""


class FreezesCluster(Protocol):
    """Capability.FREEZE_CLUSTER: chaos hang_region and partition_region for a provider whose
    clusters run on other machines (SkyPilot on Slurm: SIGSTOP, then SIGCONT, to every
    process of the allocation)."""

    def freeze_cluster(self, cluster: ClusterHandle) -> str | None:
        """Every process of the cluster stopped where it runs, its sockets left open; None
        once stopped, else why not (one line). Never raises."""

    def thaw_cluster(self, cluster: ClusterHandle) -> str | None:
        """Every process of a frozen cluster continued; None once continued, else why not."""


class CutsConnection(Protocol):
    """Capability.CUT_CONNECTION: chaos ssh_drop."""

    def cut_connection(self, cluster: ClusterHandle) -> int:
        """Cut the controller's connections to the cluster's running runtimes, the runtimes
        untouched (each connection then answers as a lost ssh session: ``reattach`` follows
        the runtime again); how many were cut."""


class UsesTokenKey(Protocol):
    """Capability.TOKEN_KEY: called once, before any launch or ``find``."""

    def use_token_key(self, token_key: bytes) -> None:
        """Derive each cluster's Ray token from ``token_key`` (the run's secret's), so that a
        controller resumed after a crash has the token of every cluster it finds again."""


class KeepsRuntime(Protocol):
    """Capability.KEEPS_RUNTIME: a lost cluster leaves its node runtime behind for a launch
    under the same name to reuse (SkyPilot on Slurm). The controller then names a run's
    clusters once per region (orchestrator/control/naming.py) and sweeps what was kept
    when the run ends. Providers without it get a name per attempt."""

    def teardown(self, cluster: ClusterHandle, keep_runtime: bool = False) -> bool:
        """As ``Provider.teardown``; ``keep_runtime``: leave the runtime for a launch under
        the cluster's name. True when something was left (``sweep_runtime`` removes it)."""

    def in_use(self, cluster_name: str) -> bool:
        """Whether the provider still knows a cluster of that name (a launch under it
        would adopt it); True when it cannot tell."""

    def sweep_runtime(self, cluster: ClusterHandle) -> None:
        """Remove what ``teardown(keep_runtime=True)`` left of ``cluster``."""
