"""The restore from peers over a real two-rank gloo group, on a real file:// store: a file
no rank holds and that fails its check in the store on one rank makes both ranks pass
over that checkpoint together, before either loads, and take the next, journaled once
with the rank and the file. (The loop's side runs in the chaos tier, tests/chaos/
test_survivors.py and test_sharded.py; here rank placement does not decide which rank
meets the bad file.)"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from recovery.store import CheckpointStore
from tests.support.runs import run_forked_ranks
from tests.support.stores import TEST_KEY

pytestmark = pytest.mark.integration

RUN = "run"


class Loop:
    """The loop's side of a restore from peers: rank r loads ``r<r>.pt``; nothing streamed."""

    def __init__(self) -> None:
        self.loaded: list[tuple[int, list[str]]] = []

    def peer_files(self, m: Any, rank: int) -> list[str]:
        return [f"r{rank}.pt"]

    def streamed_files(self, m: Any) -> set[str]:
        return set()

    def read_streamed(self, source: Any, m: Any, files: dict[str, bytes]) -> None:
        return None

    def load_files(self, source: Any, m: Any, files: dict[str, bytes], streamed: Any = None) -> int:
        self.loaded.append((m.step, sorted(files)))
        return int(m.step)

    def start_from_seed(self) -> None:
        self.loaded.append((0, []))

    def before_restore(self, step: int) -> None:
        pass


def _rank_main(rank: int, root: str) -> None:
    import torch.distributed as dist

    from orchestrator.runtime.group.survivors import GroupRecovery
    from tests.unit.orchestrator.runtime.group.test_survivors import Control, Lineage

    dist.init_process_group("gloo", init_method=f"file://{root}/pg", rank=rank, world_size=2)
    store = CheckpointStore(f"file://{root}/store", region="local-a", key=TEST_KEY)
    member = types.SimpleNamespace(epoch=1, members=types.SimpleNamespace(joining=(1,)))
    spec = types.SimpleNamespace(run_id=RUN, generation=1, peer_restore="on")
    control, loop = Control(), Loop()
    group = GroupRecovery(spec, control, rank, member, [store], lambda: (Lineage(), [store]))  # type: ignore[arg-type]
    restored = group.peer_restore(2, loop)
    out = {"restored": restored, "loaded": loop.loaded, "events": control.events}
    Path(root, f"rank{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


def test_a_file_bad_in_the_store_on_one_rank_makes_the_group_pass_over_its_checkpoint_together(
    tmp_path: Path, write_checkpoint: Any, flip_byte: Any
) -> None:
    store = CheckpointStore(f"file://{tmp_path}/store", region="local-a", key=TEST_KEY)
    for step in (10, 20):
        write_checkpoint(store, RUN, step, files={"r0.pt": f"rank 0 at {step}".encode(), "r1.pt": b"rank 1" * 99})
    flip_byte(store, RUN, 20, "r1.pt")  # rank 1's file of the newest: bad in the store, held by no rank
    assert run_forked_ranks(_rank_main, [(0, str(tmp_path)), (1, str(tmp_path))]) == [0, 0]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    # Neither rank loaded step 20 (rank 0's own file of it was good): both restored step 10.
    assert [r["restored"] for r in ranks] == [10, 10]
    assert [r["loaded"] for r in ranks] == [[[10, ["r0.pt"]]], [[10, ["r1.pt"]]]]
    skipped = [f for r in ranks for k, f in r["events"] if k == "checkpoint_skipped"]
    assert len(skipped) == 1 and skipped[0]["step"] == 20 and skipped[0]["region"] == "local-a", skipped
    assert skipped[0]["reason"].startswith("failed verification while restoring (rank 1)"), skipped
    assert "r1.pt" in skipped[0]["reason"]
    (journaled,) = [f for k, f in ranks[0]["events"] if k == "peer_restore"]
    assert journaled["step"] == 10 and journaled["bytes_from_store"] > 0, journaled
