"""A run's result comes from what its signed checkpoints prove, never from final.json alone."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import orchestrator.control.watch as watch
from orchestrator.config.compose import compose
from orchestrator.control.proof import FUNC, FUNC_SEARCH, LOOP, SEARCH, Proven, Signed, Unproven, newest_signed, prove
from orchestrator.control.wiring import build_controller
from recovery.fencing import Lineage
from recovery.keys import controller_keys
from recovery.manifest import FileEntry, Manifest, checkpoint_digest
from recovery.store import CheckpointStore
from tests.support.fakecloud import HEARTBEATS, FakeCloud, Script

pytestmark = pytest.mark.unit
W = "ab" * 32
URL = "file:///s/run/checkpoints/step-60"
REPLICA = "file:///r/run/checkpoints/step-60"


def _signed(step: int = 60, **extra: object) -> Signed:
    files = (FileEntry("model.pt", 3, "cd" * 32),)
    return Signed(Manifest("run", step, 1, files, 1.0, extra=dict(extra)), URL, (URL, REPLICA))


def test_the_loop_s_end_is_its_last_checkpoint_and_the_digest_it_names() -> None:
    got = prove(LOOP, 60, {"final_step": 60, "weights_sha256": W, "metrics": {"loss": 1}}, _signed(weights_sha256=W))
    assert got == Proven(60, URL, W)
    assert got.apply({"metrics": {"loss": 1}, "final_checkpoint": "x"})["final_checkpoint"] == URL


def test_the_claimed_store_is_kept_when_it_holds_the_checkpoint_signed() -> None:
    """Replication puts the last step in several stores: the runtime names the one it wrote."""
    assert prove(LOOP, 60, {"final_checkpoint": REPLICA}, _signed(weights_sha256=W)).final_checkpoint == REPLICA


def test_without_final_json_the_checkpoint_still_proves_the_end() -> None:
    assert prove(LOOP, 60, None, _signed(weights_sha256=W)) == Proven(60, URL, W)


@pytest.mark.parametrize(
    ("final", "signed", "why"),
    [
        ({"final_step": 10**12}, _signed(weights_sha256=W), "outside 0..60"),
        ({"final_step": "60"}, _signed(weights_sha256=W), "outside"),
        ({"weights_sha256": "f" * 64}, _signed(weights_sha256=W), "claims weights_sha256"),
        ({"final_checkpoint": "file:///etc/passwd"}, _signed(weights_sha256=W), "claims final_checkpoint"),
        ({}, None, "no signed checkpoint"),
        ({}, _signed(step=40, weights_sha256=W), "not the last step"),
        ({}, _signed(), "names no weights digest"),
        ({}, _signed(weights_sha256="nothex"), "names no weights digest"),
    ],
)
def test_a_claim_no_signed_checkpoint_backs_is_unproven(final: dict, signed: Signed | None, why: str) -> None:
    with pytest.raises(Unproven, match=why):
        prove(LOOP, 60, final, signed)


def test_a_function_s_end_is_its_newest_checkpoint_and_the_digest_of_its_files() -> None:
    signed = _signed(step=7)
    digest = checkpoint_digest({"model.pt": "cd" * 32})
    assert prove(FUNC, 60, {"final_step": 9, "checkpoint_sha256": digest}, signed) == Proven(9, URL, None, digest)
    assert prove(FUNC, 60, {"final_step": 3}, None) == Proven(3, None)
    # The model's digest the last attempt read back from the proven checkpoint, and only with one.
    got = prove(FUNC, 60, {"final_step": 9, "checkpoint_sha256": digest, "weights_sha256": W}, signed)
    assert got == Proven(9, URL, W, digest)
    with pytest.raises(Unproven, match="names a checkpoint"):
        prove(FUNC, 60, {"weights_sha256": W}, None)
    with pytest.raises(Unproven, match="not one"):
        prove(FUNC, 60, {"weights_sha256": "x" * 64}, signed)
    assert prove(FUNC, 60, {"final_step": 900}, None) == Proven(900, None)  # more reports than job.steps
    with pytest.raises(Unproven, match="checkpoint_sha256"):
        prove(FUNC, 60, {"checkpoint_sha256": "0" * 64}, signed)
    with pytest.raises(Unproven, match="no store holds"):
        prove(FUNC, 60, {"final_checkpoint": "file:///etc/passwd"}, None)
    with pytest.raises(Unproven, match="before its checkpoint"):
        prove(FUNC, 60, {"final_step": 2}, signed)


def test_a_search_s_weights_are_the_best_trial_s_in_the_signed_records() -> None:
    trials = [{"trial_id": "t0", "weights_sha256": "0" * 64}, {"trial_id": "t1", "weights_sha256": W}]
    signed = _signed(step=60, kind="hpo_experiment", trials=trials)
    assert prove(SEARCH, 60, {"best_trial": {"trial_id": "t1"}, "weights_sha256": W}, signed).weights_sha256 == W
    with pytest.raises(Unproven, match="claims weights_sha256"):
        prove(SEARCH, 60, {"best_trial": {"trial_id": "t0"}, "weights_sha256": W}, signed)
    with pytest.raises(Unproven, match="not among"):
        prove(SEARCH, 60, {"best_trial": {"trial_id": "t9"}}, signed)


def test_a_search_s_best_checkpoint_is_the_one_its_signed_snapshot_names_beside_it_and_no_other() -> None:
    trials = [{"trial_id": "trial_00000", "weights_sha256": "0" * 64}, {"trial_id": "trial_00001", "weights_sha256": W}]
    named = {"trial_00001": {"iteration": 4, "attempt": 2, "digest": W}}
    signed = _signed(step=60, kind="hpo_experiment", trials=trials, checkpoints=named)
    claims = {"best_trial": {"trial_id": "trial_00001", "checkpoint": "file:///etc/passwd"}, "weights_sha256": W}
    proven = prove(SEARCH, 60, claims, signed)
    assert proven.best_checkpoint == "file:///s/run/trials/trial_00001/checkpoints/step-4-g2"
    assert proven.apply(claims)["best_trial"]["checkpoint"] == proven.best_checkpoint
    # Every trial's, in result.json's trials: the one the snapshot names, or none.
    listed = proven.apply({**claims, "trials": [*trials, "x"]})["trials"]
    assert [t["checkpoint"] if isinstance(t, dict) else t for t in listed] == [None, proven.best_checkpoint, "x"]
    # In the replica's store when final.json names the replica; none when the snapshot names none.
    assert prove(SEARCH, 60, {**claims, "final_checkpoint": REPLICA}, signed).best_checkpoint.startswith("file:///r/")
    unnamed = _signed(step=60, kind="hpo_experiment", trials=trials)
    assert prove(SEARCH, 60, claims, unnamed).apply(claims)["best_trial"]["checkpoint"] is None
    torn = _signed(step=60, kind="hpo_experiment", trials=trials, checkpoints={"trial_00001": "../x"})
    assert prove(SEARCH, 60, claims, torn).best_checkpoint is None


def test_a_function_search_s_end_is_the_best_trial_s_checkpoint_digest_in_the_signed_records() -> None:
    trials = [
        {"trial_id": "t0", "weights_sha256": None, "checkpoint_sha256": "0" * 64, "checkpoint_iteration": 2},
        {"trial_id": "t1", "weights_sha256": None, "checkpoint_sha256": W, "checkpoint_iteration": 4},
        {"trial_id": "t2", "weights_sha256": None, "checkpoint_sha256": None, "checkpoint_iteration": 3},
        {"trial_id": "t3", "weights_sha256": None, "checkpoint_sha256": None, "checkpoint_iteration": None},
    ]
    signed = _signed(step=60, kind="hpo_experiment", trials=trials)
    claims = {"best_trial": {"trial_id": "t1"}, "checkpoint_sha256": W, "final_step": 60}
    proven = prove(FUNC_SEARCH, 60, claims, signed)
    assert (proven.weights_sha256, proven.checkpoint_sha256, proven.final_step) == (None, W, 60)
    with pytest.raises(Unproven, match="claims checkpoint_sha256"):
        prove(FUNC_SEARCH, 60, {**claims, "best_trial": {"trial_id": "t0"}}, signed)
    with pytest.raises(Unproven, match="claims weights_sha256"):
        prove(FUNC_SEARCH, 60, {**claims, "weights_sha256": W}, signed)
    # A best trial with a checkpoint must name its digest; one that never checkpointed names none.
    with pytest.raises(Unproven, match="names no weights digest"):
        prove(FUNC_SEARCH, 60, {"best_trial": {"trial_id": "t2"}}, signed)
    assert prove(FUNC_SEARCH, 60, {"best_trial": {"trial_id": "t3"}}, signed).checkpoint_sha256 is None
    # A workload's search still needs its best trial's weights.
    with pytest.raises(Unproven, match="names no weights digest"):
        prove(SEARCH, 60, claims, signed)


def test_the_newest_signed_checkpoint_on_the_lineage_across_stores(tmp_path: Path) -> None:
    key = controller_keys(b"k" * 32, "run")
    a = CheckpointStore(f"file://{tmp_path}/a", "a", key=key)
    b = CheckpointStore(f"file://{tmp_path}/b", "b", key=key)
    for store, step, attempt in ((a, 20, 1), (b, 40, 1), (a, 60, 1)):
        store.commit("run", step, attempt, [store.put("run", step, "m", b"x")])
    stranger = CheckpointStore(f"file://{tmp_path}/b", "b", key=controller_keys(b"z" * 32, "run"))
    stranger.commit("run", 90, 1, [stranger.put("run", 90, "m", b"x")])
    b.commit("run", 60, 1, [b.put("run", 60, "m", b"x")])  # a replica
    got = newest_signed([a, b], "run", Lineage())
    assert got is not None and got.manifest.step == 60 and got.url.endswith("/a/run/checkpoints/step-60-g1")
    assert [u.rsplit("/", 4)[1] for u in got.urls] == ["a", "b"]
    fenced = Lineage().then(1, 0).then(2, 40)  # attempt 1's step 60 came after attempt 2 restarted from 40
    got = newest_signed([a, b], "run", fenced)
    assert got is not None and got.manifest.step == 40


def test_of_replicated_copies_the_proof_is_the_one_final_json_names(tmp_path: Path) -> None:
    """A run that failed over commits its last checkpoint in its new region, and replication
    copies it to the first: the copy final.json names proves the end, not the first store's."""
    key = controller_keys(b"k" * 32, "run")
    a, b, c = (CheckpointStore(f"file://{tmp_path}/{r}", r, key=key) for r in "abc")
    for store in (a, b, c):
        store.commit("run", 60, 2, [store.put("run", 60, "m", b"x")], extra={"weights_sha256": W})
    claimed = b.checkpoint_url("run", 60)
    got = newest_signed([a, b, c], "run", Lineage())
    assert got is not None and got.where(claimed) == claimed
    assert (
        prove(LOOP, 60, {"final_step": 60, "final_checkpoint": claimed, "weights_sha256": W}, got).final_checkpoint
        == claimed
    )
    # Nothing claimed, or a claim no store holds: the first store's copy, and the claim is refused.
    assert newest_signed([a, b, c], "run", Lineage()).url == a.checkpoint_url("run", 60)  # type: ignore[union-attr]
    elsewhere = newest_signed([a, b, c], "run", Lineage())
    assert elsewhere is not None and elsewhere.where("file:///etc/passwd") == a.checkpoint_url("run", 60)
    with pytest.raises(Unproven, match="claims final_checkpoint"):
        prove(LOOP, 60, {"final_checkpoint": "file:///etc/passwd"}, elsewhere)
    # A newer step elsewhere still wins over the claimed store's older one.
    c.commit("run", 80, 2, [c.put("run", 80, "m", b"x")], extra={"weights_sha256": W})
    assert newest_signed([a, b, c], "run", Lineage()).manifest.step == 80  # type: ignore[union-attr]


def test_a_forged_success_fails_over_and_the_run_ends_with_its_real_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """And the forged outcome's incident holds the controller's times and steps, never the claim."""
    monkeypatch.setattr(watch, "POLL_S", 0.002)
    monkeypatch.setattr(watch, "HEALTH_SETTLE_S", 0.01)
    cloud = FakeCloud({"local-a": [Script(until=40, then="forged_finish")]})
    cfg = compose(
        [
            f"home={tmp_path}",
            "run_id=forged",
            "progress=false",
            "job.steps=60",
            *HEARTBEATS,
        ]
    )
    ctl = build_controller(cfg, cloud, "forged", out=io.StringIO())  # type: ignore[arg-type]
    result = ctl.run()
    assert result["status"] == "SUCCEEDED" and result["attempts"] == 2
    assert result["final_step"] == 60 and result["weights_sha256"] != "f" * 64
    assert "/etc/passwd" not in str(result["final_checkpoint"]) and result["final_checkpoint"].endswith("/step-60-g2")
    failures = [e for e in ctl.journal.events() if e["type"] == "failure_detected"]
    assert failures and failures[0]["kind"] == "outcome_unproven" and "final_step" in failures[0]["detail"]
    (inc,) = [i for i in result["incidents"] if i["kind"] == "outcome_unproven"]
    # final.json claimed step 10**12: the incident keeps the step the runtime reported.
    assert 0 <= inc["last_step"] <= 60 and 0 <= inc["lost_steps"] <= 60, inc
    assert inc["detected_at"] > 0 and inc["failed_at"] > 0, inc
    assert inc["rto_s"] is not None and 0 <= inc["rto_s"] < 60, inc
    (ended,) = [e for e in ctl.journal.events() if e["type"] == "attempt_ended" and e["generation"] == 1]
    assert ended["last_step"] <= 60, ended
