"""A sharded checkpoint larger than the memory its process may use commits and restores,
exact: each rank's shards spilled to disk as they serialise (checkpoint/spill.py) and
read back streamed and mapped (shard_restore.py), in a cgroup whose limit is the
process's own needs (its imports and one rank's state) plus three quarters of a shard. The way the
loop serialised before (``torch.save`` into memory) is killed under the same limit:
the bound is tight enough to tell the two apart."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.cgroup import MemoryCgroup
from tests.support.runs import skip_unless_strict

REPO = Path(__file__).resolve().parents[5]
SHARD_MIB = 256
RANKS = 5  # 1.25 GiB of checkpoint, about twice the limit

pytestmark = pytest.mark.integration


def _run(tmp_path: Path, how: str, limit: int | None) -> tuple[int, dict, int]:
    try:
        group = MemoryCgroup.create()
    except OSError as exc:
        skip_unless_strict(f"no memory cgroup to bound a process with: {exc}")
    try:
        if limit is not None:
            group.limit(limit)
        store = tmp_path / f"store-{how}"
        scratch = tmp_path / "scratch"
        scratch.mkdir(exist_ok=True)
        argv = [sys.executable, "-m", "tests.support.bounded_checkpoint", f"file://{store}", str(scratch)]
        done = group.run([*argv, str(RANKS), str(SHARD_MIB), how], cwd=str(REPO), timeout=300)
        lines = done.stdout.strip().splitlines()
        return done.returncode, json.loads(lines[-1]) if done.returncode == 0 and lines else {}, group.peak()
    finally:
        group.remove()


def test_a_checkpoint_twice_the_memory_allowed_commits_and_restores_exactly_with_one_shard_held(
    tmp_path: Path,
) -> None:
    rc, base, needs = _run(tmp_path, "baseline", None)
    assert rc == 0, "the process cannot hold one rank's state at all"
    # Its needs and three quarters of a shard more: room for the page cache the kernel
    # writes back before it may drop it (cgroup v1 counts it), less than the second copy
    # of a shard that serialising in memory holds.
    limit = needs + SHARD_MIB * 2**20 * 3 // 4
    rc, out, _ = _run(tmp_path, "spill", limit)
    assert rc == 0, f"killed (rc {rc}) under {limit / 2**20:.0f} MiB"
    assert out["bytes"] >= 1.8 * limit, (out["bytes"], limit)
    assert out["before"] == out["after"] and out["before"][0] == base["before"][0]
    assert len(set(out["after"])) == RANKS
    # The control: serialised into memory, a shard is held twice and the bound is passed.
    rc, _, _ = _run(tmp_path, "bytes", limit)
    assert rc == -9, f"serialising into memory was not stopped by the bound (rc {rc})"
