"""Checkpoint stores for tests that drive them in-process: the run's key every store signs
with, a fresh ``memory://`` prefix, a store on disk and in memory, and checkpoints written,
torn or flipped the way the training loop and a fault would. The unit tier's conftest and
the integration tests moved from it use these fixtures."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import fsspec
import pytest

from recovery.keys import AttemptKeys, controller_keys
from recovery.manifest import Manifest
from recovery.store import CheckpointStore

# The run's keys in every in-process test (the controller's: every generation, and fences):
# stores sign with them, and runtime code finds them installed.
TEST_KEY = controller_keys(bytes(range(32)), "test-run")

WriteCheckpoint = Callable[..., Manifest]
FlipByte = Callable[[CheckpointStore, str, int, str], None]


@pytest.fixture(autouse=True, scope="session")
def run_key() -> Iterator[AttemptKeys]:
    """The runtime's key, as a driver installs it (orchestrator/wire/runkey.py); for
    the whole session, as module-scoped fixtures run training too."""
    from orchestrator.wire import runkey

    runkey.install(TEST_KEY)
    yield TEST_KEY
    runkey._installed.clear()


@pytest.fixture
def memory_url() -> Iterator[str]:
    """A fresh ``memory://`` prefix; the memory filesystem is process-wide, so each test gets its own."""
    url = f"memory://t-{uuid.uuid4().hex}"
    yield url
    fs, root = fsspec.core.url_to_fs(url)
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture(params=["file", "memory"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path, memory_url: str) -> str:
    if request.param == "file":
        return f"file://{tmp_path}/store"
    return memory_url


def default_files(step: int) -> dict[str, bytes]:
    return {
        "model.pt": f"model weights at step {step};".encode() * 40,
        "optimizer.pt": f"optimizer at step {step};".encode() * 20,
        "state.pt": f"step={step}".encode(),
    }


@pytest.fixture
def write_checkpoint() -> WriteCheckpoint:
    """Write and commit one checkpoint the way the training loop does: files, then the manifest."""

    def write(
        store: CheckpointStore,
        run_id: str,
        step: int,
        files: dict[str, bytes] | None = None,
        attempt: int = 1,
        extra: dict[str, object] | None = None,
        committed_at: float | None = None,
    ) -> Manifest:
        data = default_files(step) if files is None else files
        entries = [store.put(run_id, step, name, blob, attempt) for name, blob in data.items()]
        return store.commit(run_id, step, attempt, entries, extra=extra, committed_at=committed_at)

    return write


@pytest.fixture
def write_torn() -> Callable[[CheckpointStore, str, int], None]:
    """Files of a checkpoint without its manifest: a write that died before the commit."""

    def write(store: CheckpointStore, run_id: str, step: int) -> None:
        for name, blob in default_files(step).items():
            store.put(run_id, step, name, blob)

    return write


@pytest.fixture
def flip_byte() -> FlipByte:
    """Flip one byte in the middle of a stored file, through the store's own filesystem."""

    def flip(store: CheckpointStore, run_id: str, step: int, name: str = "model.pt") -> None:
        path = f"{store.step_path(run_id, step)}/{name}"
        data = bytearray(store.fs.cat_file(path))
        data[len(data) // 2] ^= 0x01
        store.fs.pipe_file(path, bytes(data))

    return flip
