"""Fencing that cannot go backwards: a fence that does not read is a store error, never
"no fence"; generations only go up; retention and restore follow the controller's lineage.
Real ``file://`` and ``memory://`` stores throughout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from orchestrator.runtime.checkpointer import AsyncCheckpointer, CheckpointUploadError
from recovery.fencing import FENCE_NAME, FencedError, Lineage, fence_path, read_fence, scan_fences
from recovery.fsio import write_bytes
from recovery.manifest import Manifest
from recovery.store import CheckpointStore, StoreError

RUN = "fwd-run"
WriteCheckpoint = Callable[..., Manifest]
TORN_FENCES = [
    pytest.param(b'{"links": [[1, 0], [2, 5', id="torn"),
    pytest.param(b"", id="empty"),
    pytest.param(b"\xff\xfe not json", id="binary"),
    pytest.param(b'{"links": [["two", 50]]}', id="not-an-integer"),
    pytest.param(b'{"links": [[2, 50], [1, 0]]}', id="going-backwards"),
    pytest.param(b'{"lineage": []}', id="no-links"),
    pytest.param(b"[1, 2]", id="not-an-object"),
]


@pytest.fixture
def store(store_url: str) -> CheckpointStore:
    return CheckpointStore(store_url, region="a")


def _tear(store: CheckpointStore, raw: bytes) -> None:
    """What a torn write or bit rot leaves in place of the fence."""
    write_bytes(store.fs, fence_path(store, RUN), raw)


@pytest.mark.parametrize("raw", TORN_FENCES)
def test_a_fence_that_does_not_parse_is_a_store_error_naming_it(store: CheckpointStore, raw: bytes) -> None:
    _tear(store, raw)
    with pytest.raises(StoreError) as err:
        read_fence(store, RUN)
    message = str(err.value)
    assert FENCE_NAME in message and "region a" in message and "\n" not in message
    scan = scan_fences([store], RUN)
    assert scan.generation == 0 and list(scan.failed) == ["a"] and FENCE_NAME in scan.failed["a"]


def test_no_fence_at_all_is_none_and_a_folder_in_its_place_is_a_store_error(tmp_path: Any) -> None:
    store = CheckpointStore(f"file://{tmp_path}/s", region="a")
    assert read_fence(store, RUN) is None
    (tmp_path / "s" / RUN / FENCE_NAME).mkdir(parents=True)
    with pytest.raises(StoreError, match=FENCE_NAME):
        read_fence(store, RUN)


@pytest.mark.parametrize("raw", TORN_FENCES[:2])
def test_a_zombie_cannot_commit_past_a_torn_fence_and_neither_can_anyone(store: CheckpointStore, raw: bytes) -> None:
    store.write_fence(RUN, Lineage().then(1, 0).then(2, 50))
    _tear(store, raw)
    entry = store.put(RUN, 100, "model.pt", b"zombie")
    for attempt in (1, 2):
        with pytest.raises(StoreError, match=FENCE_NAME):
            store.commit(RUN, 100, attempt, [entry], fenced=True)
    assert store.committed_steps(RUN) == []
    store.write_fence(RUN, Lineage().then(1, 0).then(2, 50))  # the next fence replaces it
    with pytest.raises(FencedError):
        store.commit(RUN, 100, 1, [entry], fenced=True)
    store.commit(RUN, 100, 2, [entry], fenced=True)
    assert store.committed_steps(RUN) == [100]


def test_the_uploader_retries_a_torn_fence_then_falls_back_and_is_fenced_there(tmp_path: Any, memory_url: str) -> None:
    """A zombie of attempt 1 whose store's fence is torn: no commit there (retried as a
    store error), then the next store, whose fence says attempt 2 took over: fenced."""
    torn = CheckpointStore(f"file://{tmp_path}/a", region="a")
    fenced = CheckpointStore(memory_url, region="b")
    torn.write_fence(RUN, Lineage().then(1, 0))
    _tear(torn, b'{"links": [[1, 0], [2,')
    fenced.write_fence(RUN, Lineage().then(1, 0).then(2, 40))
    events: list[tuple[str, dict[str, Any]]] = []
    ckpt = AsyncCheckpointer(
        [torn, fenced], RUN, generation=1, keep_last=2, outage_s=0.3, on_event=lambda t, f: events.append((t, f))
    )
    ckpt.submit(60, {"model.pt": b"zombie weights"}, {})
    with pytest.raises(CheckpointUploadError) as err:
        ckpt.wait(timeout_s=20)
    assert isinstance(err.value.__cause__, FencedError)
    kinds = [t for t, _ in events]
    assert kinds[0] == "upload_retry" and FENCE_NAME in events[0][1]["error"]
    assert "store_fallback" in kinds and kinds[-1] == "fenced_write"
    assert torn.committed_steps(RUN) == [] and fenced.committed_steps(RUN) == []
