"""Which node of its cluster a rank runs on, by the label its provider gave the node.

A provider labels each Ray node it starts with its index (``NODE_LABEL``: 0 the head,
worker nodes 1.., as ``Provider.nodes`` numbers them). Rank 0 journals every rank's
index with ``train_started`` (``worker_nodes``), so the controller can tell a lost node
that held a worker of the group (the group restarts, an incident) from an idle one (a
spare node: the group trains on, nothing to restart). A node without the label
(another provider, a cluster started by hand) is unknown, and so is the whole list.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.wire.schema import MAX_NODE_INDEX, NODE_LABEL

UNKNOWN = -1


def node_index(labels: Mapping[str, str]) -> int:
    """The node's index from its Ray labels; UNKNOWN when absent or not an index. Pure."""
    value = labels.get(NODE_LABEL, "")
    if not (value.isascii() and value.isdigit()) or len(value) > 6:
        return UNKNOWN
    index = int(value)
    return index if index <= MAX_NODE_INDEX else UNKNOWN


def my_node() -> int:
    """This process's node index (UNKNOWN outside a labelled Ray node)."""
    try:
        import ray

        if not ray.is_initialized():  # asking would start a Ray of its own
            return UNKNOWN
        return node_index(ray.get_runtime_context().get_node_labels())
    except Exception:
        return UNKNOWN


def known(indexes: list[int]) -> list[int] | None:
    """Every rank's node index, or None when any is unknown (a half-known list would read
    as "that node ran no worker"). Pure."""
    return None if not indexes or any(i < 0 for i in indexes) else list(indexes)
