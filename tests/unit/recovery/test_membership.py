"""Each epoch's signed members, who they admit, and who sends which file to whom."""

from __future__ import annotations

import json

import pytest

from recovery.membership import MAX_RECORD_BYTES, Members, MembershipError, Transfer, admit, plan_transfers

pytestmark = pytest.mark.unit

KEY = b"k" * 32
OLD_KEY = b"o" * 32
M = Members("run-1", 3, 1, (101, 202), "join", (1,))


def test_a_record_reads_back_only_with_its_generations_key() -> None:
    wire = M.to_wire(KEY)
    assert Members.from_wire(wire, KEY) == M
    # An older generation's process holds no key that checks it; a forger holds none either.
    with pytest.raises(MembershipError, match="not signed with this generation's key"):
        Members.from_wire(wire, OLD_KEY)
    with pytest.raises(MembershipError, match="beyond this process's keys"):
        Members.from_wire(wire, None)


def test_a_changed_record_fails_its_signature() -> None:
    outer = json.loads(M.to_wire(KEY))
    outer["members"]["pids"] = [101, 999]  # a replaced rank naming itself again
    with pytest.raises(MembershipError, match="not signed"):
        Members.from_wire(json.dumps(outer).encode(), KEY)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda o: o["members"].update(mode="take"), "mode 'take'"),
        (lambda o: o["members"].update(joining=[5]), "joining"),
        (lambda o: o["members"].update(pids=[]), "0 ranks"),
        (lambda o: o["members"].update(pids=[-1, 2]), "malformed"),
        (lambda o: o["members"].update(epoch=True), "malformed"),
        (lambda o: o.pop("mac"), "malformed"),
    ],
)
def test_a_malformed_record_is_one_line(change, why) -> None:
    outer = json.loads(M.to_wire(KEY))
    change(outer)
    with pytest.raises(MembershipError, match=why):
        Members.from_wire(json.dumps(outer).encode(), KEY)


def test_a_record_too_large_is_refused_unread() -> None:
    with pytest.raises(MembershipError, match="bytes"):
        Members.from_wire(b" " * (MAX_RECORD_BYTES + 1), KEY)


def test_admission_takes_the_named_process_at_its_rank_and_refuses_the_rest() -> None:
    ok = {"run_id": "run-1", "generation": 3, "epoch": 1}
    assert admit(M, **ok, rank=1, pid=202) is None
    assert admit(M, **ok, rank=0, pid=101) is None
    # The process the group replaced (rank 1 was pid 150 before): refused.
    assert "replaced" in (admit(M, **ok, rank=1, pid=150) or "")
    # A rank of an older generation: fenced.
    assert "fenced" in (admit(M, **{**ok, "generation": 2}, rank=1, pid=202) or "")
    assert "epoch 1's, not epoch 0's" in (admit(M, **{**ok, "epoch": 0}, rank=1, pid=202) or "")
    assert "run 'run-1'" in (admit(M, **{**ok, "run_id": "other"}, rank=1, pid=202) or "")
    assert "not in a group of 2" in (admit(M, **ok, rank=2, pid=202) or "")


FILES = ["model.pt", "optimizer.pt", "state.pt"]


def needs(world: int) -> dict[int, list[str]]:
    return {r: [*FILES, f"rng-rank{r}.pt"] for r in range(world)}


def test_a_replacement_gets_every_file_from_the_lowest_survivor_and_survivors_their_own() -> None:
    every = [*FILES, "rng-rank0.pt", "rng-rank1.pt", "rng-rank2.pt"]
    transfers, from_store = plan_transfers(needs(3), {0: every, 1: every, 2: []})
    assert from_store == {}
    assert transfers == sorted([Transfer(n, 0, 2) for n in [*FILES, "rng-rank2.pt"]], key=lambda t: (t.name, t.dst))


def test_what_no_survivor_holds_comes_from_the_store_for_that_rank_only() -> None:
    # Rank 0 (which alone held workload.pt) was lost; rank 1 holds the model and its own RNG.
    need = {0: ["model.pt", "workload.pt", "rng-rank0.pt"], 1: ["model.pt", "workload.pt", "rng-rank1.pt"]}
    transfers, from_store = plan_transfers(need, {0: [], 1: ["model.pt", "rng-rank1.pt"]})
    assert transfers == [Transfer("model.pt", 1, 0)]
    assert from_store == {0: ["rng-rank0.pt", "workload.pt"], 1: ["workload.pt"]}


def test_the_plan_is_the_same_whatever_order_its_inputs_come_in() -> None:
    held = {2: ["model.pt"], 0: ["state.pt", "model.pt"], 1: []}
    a = plan_transfers(needs(3), held)
    b = plan_transfers(dict(reversed(list(needs(3).items()))), dict(reversed(list(held.items()))))
    assert a == b
