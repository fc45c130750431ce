"""Which stores a committed checkpoint is copied to, and what a copy that cannot be made does."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.runtime.checkpoint.replicate import Replicator, replica_targets
from recovery.store import CheckpointStore
from tests.support.stores import TEST_KEY

RUN = "replicated-run"

pytestmark = pytest.mark.unit


def test_every_store_but_the_source_less_those_left_alone_until_later() -> None:
    a, b, c = (SimpleNamespace(region=r) for r in "abc")
    stores = [a, b, c]
    assert replica_targets(stores, a, {}, now=100.0) == [b, c]  # type: ignore[arg-type]
    assert replica_targets(stores, a, {"b": 120.0}, now=100.0) == [c]  # type: ignore[arg-type]
    assert replica_targets(stores, a, {"b": 100.0}, now=100.0) == [b, c]  # type: ignore[arg-type]
    assert replica_targets([a], a, {}, now=0.0) == []  # type: ignore[arg-type]


def test_a_source_file_changed_since_its_commit_is_not_copied_and_training_is_not_stopped(tmp_path: Path) -> None:
    """A sharded checkpoint's other rank's file, read back from the source to be copied,
    that no longer matches the signed manifest (corrupted in the store after the commit,
    seen in CI as a restore's corruption landed while the survivor still replicated): the
    replica is not committed, the failure is journaled, and nothing is raised into the
    upload (which used to stop the worker's training with CheckpointUploadError). The
    replica's store is not left alone for it: the next checkpoint is copied there at once."""
    source = CheckpointStore(f"file://{tmp_path}/a", region="a", key=TEST_KEY)
    replica = CheckpointStore(f"file://{tmp_path}/b", region="b", key=TEST_KEY)
    own, other = b"rank 0's shards" * 100, b"rank 1's shards" * 100
    entries = [source.put(RUN, 10, "shard-r0.pt", own, generation=1), source.put(RUN, 10, "shard-r1.pt", other, 1)]
    manifest = source.commit(RUN, 10, 1, entries)
    path = f"{source.step_path(RUN, 10)}/shard-r1.pt"
    source.fs.pipe_file(path, b"x" + other[1:])
    events: list[tuple[str, dict[str, Any]]] = []
    with ThreadPoolExecutor(max_workers=2) as files_pool:
        replicator = Replicator(
            [source, replica],
            RUN,
            1,
            keep_last=2,
            files_pool=files_pool,
            outage_s=60.0,
            on_event=lambda *e: events.append(e),
        )
        replicator.replicate(source, manifest, {"shard-r0.pt": own})
        ((kind, fields),) = events
        assert kind == "replication_failed" and fields["to"] == "b", events
        assert "shard-r1.pt does not match its manifest" in fields["error"], fields
        assert replica.latest_verified(RUN) is None
        # Put right in the source: copied to the same replica store with no wait.
        source.fs.pipe_file(path, other)
        replicator.replicate(source, manifest, {"shard-r0.pt": own})
    assert [kind for kind, _ in events[1:]] == ["replicated"], events
    copied = replica.latest_verified(RUN)
    assert copied is not None and copied.step == 10 and {f.name for f in copied.files} == {"shard-r0.pt", "shard-r1.pt"}
