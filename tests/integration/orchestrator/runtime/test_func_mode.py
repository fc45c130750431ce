"""job.train_func without a Ray cluster: the report hook, step numbering, rank merging,
checkpoint_sha256, restore, preemption and user errors, on real file:// stores.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.runtime import func_mode
from orchestrator.runtime.func_mode import (
    write_checkpoint_dir,
)
from orchestrator.wire.control import ControlChannel
from recovery.store import CheckpointStore
from tests.support.runs import run_forked_ranks
from tests.support.stores import TEST_KEY
from tests.unit.orchestrator.runtime.test_func_mode import events, make_spec

pytestmark = pytest.mark.integration


def _rank_main(rank: int, root: str) -> None:
    """One of two ranks: reports with checkpoints from both, from one, and none, then a notice."""
    import torch.distributed as dist
    from ray.train import Checkpoint

    dist.init_process_group("gloo", init_method=f"file://{root}/pg", rank=rank, world_size=2)
    spec = make_spec(Path(root), 1, {}, async_upload=False)
    run = func_mode.FuncRun(spec, rank, 2, ControlChannel(spec.control_url))
    steps: list[int] = []

    def report(files: dict[str, str] | None) -> None:
        if files is None:
            run.report({"loss": 1.0}, None, False)
        else:
            folder = Path(root, f"r{rank}-{len(steps)}")
            write_checkpoint_dir({k: v.encode() for k, v in files.items()}, str(folder))
            run.report({"loss": 1.0}, Checkpoint.from_directory(str(folder)), False)
        steps.append(run.count)

    stopped_at = None
    try:
        report({f"rank-{rank}.txt": str(rank), "shared.txt": f"from {rank}"})  # both ranks: merged
        report(None)  # metrics only: no step
        report({"rank-1-only.txt": "1"} if rank == 1 else None)  # another rank than 0 alone
        if rank == 0:
            run._preempt.set()  # the notice, as the watch thread sets it on rank 0
        report(None)  # agreed, but no checkpoint to commit: goes on
        report({"last.txt": "0"} if rank == 0 else None)  # committed, then both stop
        report(None)
    except func_mode.Stop as stop:
        stopped_at = stop.args[0]
    Path(root, f"rank{rank}.json").write_text(json.dumps({"steps": steps, "stopped_at": stopped_at}))
    dist.destroy_process_group()


def test_two_ranks_merge_their_folders_number_steps_alike_and_stop_together(tmp_path: Path) -> None:
    assert run_forked_ranks(_rank_main, [(rank, str(tmp_path)) for rank in (0, 1)]) == [0, 0]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1] == {"steps": [1, 1, 2, 2], "stopped_at": 3}
    store = CheckpointStore(f"file://{tmp_path}/store", region="r", key=TEST_KEY)
    assert store.committed_steps("fn-unit") == [1, 2, 3]
    read = {
        step: {f.name: store.read(m, f.name) for f in m.files}
        for step in (1, 2, 3)
        if (m := store.manifest("fn-unit", step))
    }
    assert read[1] == {"rank-0.txt": b"0", "rank-1.txt": b"1", "shared.txt": b"from 0"}
    assert read[2] == {"rank-1-only.txt": b"1"}
    assert read[3] == {"last.txt": b"0"}
    spec = make_spec(tmp_path, 1, {})
    assert [(e["step"], e["names"]) for e in events(spec, "checkpoint_merge_conflict")] == [(1, ["shared.txt"])]
    assert [e["step"] for e in events(spec, "preempted")] == [3]
