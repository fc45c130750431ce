"""A spare Ray Train worker on each node, started before it is needed.

When Ray Train replaces a lost worker (survivors kept, see rendezvous.py), a new worker
process must start, import torch, Ray Train and the workload, and build the model: on
this machine about two seconds, on a GPU node far more. So once a worker group runs,
each of its nodes gets one spare: a Ray Train worker actor of the same class and
runtime environment, reserving no CPU (it idles), that imports the training loop and
the workload's module at once. A replacement on that node is handed the spare instead
of a new actor, and so is each worker of a group that Ray Train starts again whole on
nodes that hold spares (a world that shrank after a lost node; any restart where
survivors are not kept: ``runtime.plan.why_no_spares`` says where there are none); a new
spare is then started there for the next loss. Each hand-over is journaled (``spare_taken``).

The spare runs outside the worker group's placement group: the lost worker's bundle
stays reserved and unused while the spare trains in its place, on the CPU the lost
worker freed. A node that joins while the group runs (one added for a lost one) gets
its spare as soon as the driver sees it, and the group waits for that spare rather
than start a worker of its own. Every other node that fits a worker holds a spare too
(spare nodes, orchestrator/runtime/group/spare_nodes.py): a worker whose node is lost takes
the spare of a node with room at once; the local provider has such a node's idle worker
process import torch and the training loop while it comes up (providers/local/nodes.py,
REPLACEMENT_ENV), so the spare lands on a process that has them.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from orchestrator.runtime.group import spare_nodes

# Spares start once the group trains again (a process that imports torch takes a core
# for a second or two, which the group's first steps need more), looked for this often,
# and at the latest after WAIT_S.
POLL_S = 0.2
WAIT_S = 120.0
# How often the driver looks for a node that joined (a replacement).
NODES_POLL_S = 0.2
# How long a spare has to answer for its node to be vouched for (a live node's answers
# in milliseconds; a dead one's never, until Ray declares the node dead seconds later).
VOUCH_S = 0.3
# node id -> the spare actor waiting there; the driver's, for every worker group it starts.
_spares: dict[str, Any] = {}
# node id -> a call to its spare queued behind the preload: ready once the spare is.
_ready: dict[str, Any] = {}
# The workload the spares preload; empty: no spares (the group restarts whole on a loss).
_workload: list[str] = []
# The modules the spares import ahead (the worker's training function's, by name: this
# package sits below the loop and imports none of it).
_modules: list[str] = []
# Object refs in every worker's config (the run's keys): fetched by each spare ahead.
_shared: list[Any] = []
# Whether the group has trained a step since a time (the driver reads its progress).
_training: list[Callable[[float], bool]] = []
# Journals one hand-over (the driver's control channel): rank, pid, waited_s, restart.
_journal: list[Callable[..., None]] = []


def enable(
    workload: str,
    training: Callable[[float], bool],
    journal: Callable[..., None] | None = None,
    shared: list[Any] | None = None,
    modules: Sequence[str] = (),
) -> None:
    """The driver keeps spares from now on, preloading ``workload`` (job.workload) and
    ``modules`` (the training loop's, by name); ``training(since)``: whether the group
    reported a trained step since then; ``journal(**fields)``: where each hand-over is
    told (``spare_taken``); ``shared``: the object refs every worker reads (each spare
    fetches them ahead, ``preload``)."""
    _workload[:] = [workload]
    _modules[:] = list(modules)
    _shared[:] = list(shared or ())
    _training[:] = [training]
    _journal[:] = [journal] if journal is not None else []


def split(
    indices: list[int], take: Callable[[int], Any], clock: Callable[[], float] = time.monotonic
) -> tuple[list[tuple[Any, float]], list[int]]:
    """``take(i)`` for each bundle index: the spares it handed over, each with the seconds
    the group waited for it (a spare still importing is waited for), and the indices
    that got none (new actors start there). Pure but for ``take``."""
    taken: list[tuple[Any, float]] = []
    rest: list[int] = []
    for i in indices:
        t0 = clock()
        worker = take(i)
        if worker is None:
            rest.append(i)
        else:
            taken.append((worker, round(clock() - t0, 3)))
    return taken, rest


def journal_taken(taken: list[tuple[Any, float]], restart: str) -> None:
    """One ``spare_taken`` per spare handed over (its rank once assigned, its pid, the wait);
    ``restart``: "replacement" (one lost worker's) or "group" (the whole group's start)."""
    for worker, waited in taken:
        try:
            rank = int(worker.distributed_context.world_rank)
            if _journal:
                _journal[0](rank=rank, pid=int(worker.metadata.pid), waited_s=waited, restart=restart)
        except Exception:
            pass  # the journal line is lost; the hand-over stands


def enabled() -> bool:
    return bool(_workload)


def preload(workload: str, modules: Sequence[str] = (), *_fetched: Any) -> None:
    """On a spare: import what a worker's first step needs, ``modules`` (the training loop:
    torch, the loop, the uploader) and the workload's (a failure here is the worker's own
    to report, when it builds the workload for real). ``_fetched``: the objects every
    worker gets from the driver (the training function, the run's keys), passed by
    reference so that Ray copies them to the spare's node now, while every node holding
    a copy is alive. Fetched once the spare is handed over, a copy Ray still lists on a
    node that just died can cost the pull's 10 s timeout (Ray's
    ``object_manager_pull_timeout_ms``) before another copy is tried."""
    try:
        import torch

        for name in modules:
            importlib.import_module(name)

        # torch starts its autograd engine at the first backward pass, and imports its
        # compiler stack (torch._dynamo, most of a second) at the first optimizer built:
        # both now, not in the recovery.
        probe = torch.nn.Linear(2, 1)
        probe(torch.ones(1, 2)).sum().backward()
        torch.optim.SGD(probe.parameters(), lr=0.0).step()

        if workload:
            from orchestrator.workloads import workload_class

            workload_class(workload)
    except Exception:
        pass


def start_spares(
    group: Any,
    node_ids: list[str],
    resources: dict[str, float] | None = None,
    dead: Callable[[], frozenset[str]] = frozenset,
) -> None:
    """One spare on each of ``node_ids`` that has none, once the group trains (in the
    background); with a worker's ``resources``, on every other live node that fits a
    worker too (a spare node's, orchestrator/runtime/group/spare_nodes.py) but the ``dead()``."""
    args = (group, node_ids, time.time(), resources, dead)
    threading.Thread(target=_start, args=args, name="spares", daemon=True).start()
    if not _watching:
        _watching.append(True)
        threading.Thread(target=_new_nodes, args=(group,), name="spares-nodes", daemon=True).start()


_watching: list[bool] = []


def _alive() -> set[str]:
    return set(spare_nodes.live_nodes())


def _new_nodes(group: Any) -> None:
    """A node that joins the cluster while the group runs is a replacement for a lost one:
    its spare starts at once, while the group waits for Ray to let the lost node go."""
    try:
        known = _alive()
        while True:
            time.sleep(NODES_POLL_S)
            alive = _alive()
            new = sorted(alive - known)
            known = alive
            if new:
                _start_now(group, new)
    except Exception:
        return  # no more spares for new nodes: their workers start as they would without


def _start(
    group: Any,
    node_ids: list[str],
    since: float,
    resources: dict[str, float] | None,
    dead: Callable[[], frozenset[str]],
) -> None:
    deadline = time.monotonic() + WAIT_S
    try:
        while _training and not _training[0](since) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if resources is not None:
            lost = dead()
            node_ids = [
                *node_ids,
                *(n for n in spare_nodes.fitting(spare_nodes.live_nodes(), resources) if n not in lost),
            ]
        _start_now(group, node_ids)
    except Exception:
        pass  # no spare: a replacement starts its worker as it would without one


def _start_now(group: Any, node_ids: list[str]) -> None:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    runtime_env = group._get_worker_runtime_env(
        custom_runtime_env=group._train_run_context.run_config.worker_runtime_env
    )
    cls = ray.remote(runtime_env=runtime_env, num_cpus=0)(group._worker_cls)
    alive = _alive()
    for node in sorted(set(node_ids)):
        if node in _spares or node not in alive:
            continue  # one waits there already, or the node is gone since
        actor = cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)).remote()
        workload = _workload[0] if _workload else ""
        actor.execute.remote(preload, workload, tuple(_modules), *_shared, *_train_fn_ref(group))
        _spares[node] = actor
        _ready[node] = actor.get_metadata.remote()  # answered once the preload is done


def _train_fn_ref(group: Any) -> list[Any]:
    wrapper = getattr(getattr(group, "_worker_group_context", None), "train_fn_ref", None)
    ref = getattr(wrapper, "_ref", None)  # Ray Train's ObjectRefWrapper, dereferenced by hand
    return [] if ref is None else [ref]


def ask_ready(timeout_s: float = VOUCH_S) -> tuple[set[str], set[str]]:
    """The nodes whose spare is ready (it answered once, after its preload), and those of
    them whose spare does not answer now within ``timeout_s`` (asked all at once)."""
    import ray

    ready = _ready_nodes()
    asked = {_spares[node].get_metadata.remote(): node for node in ready if node in _spares}
    if not asked:
        return ready, set()
    done, _ = ray.wait(list(asked), num_returns=len(asked), timeout=timeout_s)
    answered = {asked[ref] for ref in done if _answered(ref)}
    return ready, ready - answered


class SpareNodes:
    """Where the bundles of one round of replacements take a spare when their node is
    lost: a live node with room beyond the group's workers (``busy``, one node id per
    worker it keeps; ``dead``, nodes known lost), worked out once, at the first ask."""

    def __init__(self, busy: list[str], resources: dict[str, float], dead: frozenset[str]) -> None:
        self.busy, self.resources, self.dead = busy, resources, dead
        self.free: dict[str, int] | None = None

    def node(self) -> str | None:
        try:
            if self.free is None:
                self.free = spare_nodes.room(spare_nodes.live_nodes(), self.resources, self.busy, self.dead)
            return spare_nodes.pick(self.free, list(_spares), _ready_nodes())
        except Exception:
            return None  # no spare node: the bundle waits for Ray to place it again, as before


def _ready_nodes() -> set[str]:
    """The nodes whose spare answered once, after its preload."""
    return {node for node, ref in list(_ready.items()) if _answered(ref)}


def _answered(ref: Any) -> bool:
    import ray

    try:
        ray.get(ref, timeout=0)
    except Exception:
        return False
    return True


def vouch(node_ids: set[str], timeout_s: float = VOUCH_S) -> bool:
    """Every node of ``node_ids`` is alive now: the spare waiting there answered within
    ``timeout_s``. False when one has no spare or its spare did not answer (the node may
    be gone, with Ray still counting it)."""
    import ray

    actors = [_spares.get(node) for node in node_ids]
    if not actors or any(a is None for a in actors):
        return False
    try:
        ray.get([a.get_metadata.remote() for a in actors], timeout=timeout_s)
    except Exception:
        return False
    return True


def take_spare(
    placement_group: Any,
    bundle_index: int,
    resources: dict[str, float],
    elsewhere: Callable[[], str | None] | None = None,
    dead: frozenset[str] = frozenset(),
) -> Any:
    """The spare on the node of ``bundle_index``'s bundle as a Ray Train ``Worker`` for that
    bundle, or None (no spare there, or it died with its node). ``elsewhere``: where a
    bundle whose node is known lost (in ``dead``), or not placed, takes a spare
    (``SpareNodes.node``)."""
    import ray
    from ray.exceptions import RayActorError
    from ray.train.v2._internal.execution.worker_group.worker import Worker
    from ray.util.placement_group import placement_group_table

    node = placement_group_table(placement_group).get("bundles_to_node_id", {}).get(bundle_index)
    if (node is None or str(node) in dead) and elsewhere is not None:
        node = elsewhere()
    actor = _spares.pop(str(node), None) if node is not None else None
    _ready.pop(str(node), None)
    if actor is None:
        return None
    try:
        meta = ray.get(actor.get_metadata.remote(), timeout=30)
    except (RayActorError, ray.exceptions.GetTimeoutError):
        return None
    return Worker(actor, meta, resources, placement_group_bundle_index=bundle_index)
