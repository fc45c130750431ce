"""A worker's assignment from the driver: which rank watches its node's notices (the
rendezvous itself, over real stores and gloo groups: tests/integration, same path)."""

from __future__ import annotations

import pytest

from orchestrator.runtime.group import rendezvous

pytestmark = pytest.mark.unit


def test_one_worker_per_node_watches_its_notices_and_a_replacement_takes_over_a_lost_watch() -> None:
    first = rendezvous.node_watchers({0: "a", 1: "a", 2: "b", 3: "b"}, {})
    assert first == {0: "a", 2: "b"}
    # Rank 2 lost with node b; its replacement lands on a new node c: it watches there.
    assert rendezvous.node_watchers({0: "a", 1: "a", 2: "c", 3: "b"}, first) == {0: "a", 2: "c", 3: "b"}
    # Rank 1 (not a watcher) replaced on node a: the watch stays with rank 0.
    assert rendezvous.node_watchers({0: "a", 1: "a", 2: "b", 3: "b"}, first) == first


def test_what_needs_the_group_while_it_forms_waits_for_it_and_meets_its_error() -> None:
    """FSDP's mesh is made while the model is built, beside the group's formation: made
    before the group, it would start one of its own from an environment that names none."""
    import threading

    member = object.__new__(rendezvous.GroupMember)
    member._forming = None
    member.wait_formed()  # nothing forming: at once
    release, formed = threading.Event(), []

    def form() -> None:
        release.wait(30)
        formed.append(True)

    member.form = form  # type: ignore[method-assign]
    waited = member.form_in_background()
    builder = threading.Thread(target=member.wait_formed)
    builder.start()
    builder.join(0.05)
    assert builder.is_alive() and not formed, "the builder went on before the group formed"
    release.set()
    builder.join(30)
    assert not builder.is_alive() and formed == [True]
    waited()  # the worker's own wait, after the build, passes too

    def fails() -> None:
        raise RuntimeError("a member never came")

    member.form = fails  # type: ignore[method-assign]
    member.form_in_background()
    with pytest.raises(RuntimeError, match="never came"):
        member.wait_formed()
