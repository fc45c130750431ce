"""A run's files as readers meet them: damage is a DamagedFile naming the file (one line
for the user), torn journal tails are still skipped, and preflight names the key at fault."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runstate.journal import DamagedFile, Journal, load_json, read_events
from orchestrator.runstate.result import RunRecord, build_result, read_result, shown_total, steps_done
from recovery.store import CheckpointStore
from tests.support.stores import TEST_KEY, WriteCheckpoint

RESULT = {
    "run_id": "r",
    "status": "SUCCEEDED",
    "reason": "",
    "final_step": 10,
    "final_checkpoint": None,
    "metrics": {"accuracy": 0.9},
    "incidents": [],
    "attempts": 1,
    "duration_s": 1.5,
}


def damaged(call: Any, name: str) -> str:
    with pytest.raises(DamagedFile) as info:
        call()
    assert name in str(info.value)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_a_result_as_written_reads_back(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text(json.dumps(RESULT))
    assert read_result(str(tmp_path)) == RESULT
    assert read_result(str(tmp_path / "none")) is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (b"", "is empty"),
        (json.dumps(RESULT)[:30].encode(), "not valid JSON"),
        (b"\xff\xfe\x00garbage", "not text"),
        (b"[]", "not a JSON object"),
        (json.dumps({**RESULT, "status": 5}).encode(), "'status'"),
        (json.dumps({**RESULT, "status": "RUNNING"}).encode(), "RUNNING"),
        (json.dumps({k: v for k, v in RESULT.items() if k != "incidents"}).encode(), "'incidents'"),
        (json.dumps({**RESULT, "incidents": [{"kind": 1}]}).encode(), "incident 0"),
        (json.dumps({**RESULT, "duration_s": "long"}).encode(), "'duration_s'"),
        (b"[" * 100_000, "nests too deep"),
    ],
)
def test_a_damaged_result_is_named_in_one_line(tmp_path: Path, text: bytes, words: str) -> None:
    (tmp_path / "result.json").write_bytes(text)
    assert words in damaged(lambda: read_result(str(tmp_path)), "result.json")


def test_a_result_that_is_a_folder_is_damage(tmp_path: Path) -> None:
    (tmp_path / "result.json").mkdir()
    damaged(lambda: read_result(str(tmp_path)), "result.json")


def test_load_json_of_nothing_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_json(str(tmp_path / "config.json"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(FileNotFoundError):
        load_json(str(tmp_path / "f" / "config.json"))


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("[1, 2]", "line 2 is list"),
        ('"x"', "line 2 is str"),
        ("{}", "lacks 'type'"),
        ('{"type": "a", "ts": "yesterday"}', "'ts'"),
        ('{"type": "a", "ts": NaN}', "'ts'"),
        ('{"type": "transition", "ts": 1.0, "to": "BOGUS"}', "BOGUS"),
        ('{"type": "incident", "ts": 1.0, "kind": "region_lost"}', "lacks 'from_region'"),
        ('{"type": "attempt_started", "ts": 1.0, "generation": "1", "region": "a"}', "'generation'"),
        ('{"type": "decision", "ts": 1.0, "failure": "x", "action": "y"}', "decision"),
    ],
)
def test_a_journal_line_that_is_no_event_is_damage_named_by_line(tmp_path: Path, line: str, words: str) -> None:
    path = tmp_path / "journal.jsonl"
    Journal(str(path)).append("run_started")
    with path.open("a") as fh:
        fh.write(line + "\n")
    assert words in damaged(lambda: list(read_events(str(path))), "journal.jsonl")


def test_a_journal_line_that_is_not_text_is_damage(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"type": "a", "ts": 1}\n\xff\xfe\x80\n')
    assert "line 2" in damaged(lambda: list(read_events(str(path))), "journal.jsonl")


def test_torn_lines_and_huge_garbage_lines_are_skipped_as_before(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    j = Journal(str(path))
    j.append("run_started")
    with path.open("a") as fh:
        fh.write('{"ts": 1.0, "type": "torn", "fie\n' + "x" * 1_000_000 + "\n")
    j.append("run_finished")
    assert [e["type"] for e in read_events(str(path))] == ["run_started", "run_finished"]


def test_a_journal_under_a_file_is_no_journal_and_a_folder_is_damage(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert list(read_events(str(tmp_path / "f" / "journal.jsonl"))) == []
    (tmp_path / "journal.jsonl").mkdir()
    damaged(lambda: list(read_events(str(tmp_path / "journal.jsonl"))), "journal.jsonl")


# --- preflight names the key at fault ---------------------------------------------------------


def test_an_unfinished_runs_step_is_at_least_its_newest_checkpoints() -> None:
    # Ctrl-C: the journal last saw step 1059, the workers had committed step-1100 by then.
    assert steps_done([0, 1059], 1100) == 1100
    assert steps_done([1180], 1100) == 1180
    assert steps_done([], None) == 0


def test_a_finished_search_is_shown_out_of_the_steps_it_took() -> None:
    # 6 trials to max_t 6 is at most 42 search steps; ASHA stopped four early: it took 26.
    search = {"status": "SUCCEEDED", "final_step": 26, "trials": [], "best_trial": {}}
    assert shown_total(search, 42) == 26 and shown_total(search, None) == 26
    # Not ended well, it did not take all it would have: its most stays.
    assert shown_total({**search, "status": "INTERRUPTED"}, 42) == 42
    assert shown_total({**search, "status": "FAILED"}, 42) == 42
    # A run's total is its own (job.steps, a train function's declared reports).
    assert shown_total({"status": "SUCCEEDED", "final_step": 500}, 500) == 500
    assert shown_total({"status": "SUCCEEDED", "final_step": 7}, None) is None


def test_a_stopped_runs_checkpoint_is_in_the_region_it_ended_in(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    """A drill lost local-a, the run went on in local-b and was stopped: step 2650 is in both
    stores (replicated back), and the summary's checkpoint is local-b's, as its region is."""
    a, b, c = (
        CheckpointStore(f"file://{tmp_path}/{r}", region=r, key=TEST_KEY) for r in ("local-a", "local-b", "local-c")
    )
    for store in (a, b):
        write_checkpoint(store, "r", 2600, attempt=1)
        write_checkpoint(store, "r", 2650, attempt=2)
    stores = {"local-a": a, "local-b": b, "local-c": c}
    attempts = [{"generation": 1, "region": "local-a", "last_step": 2372}, {"generation": 2, "region": "local-b"}]
    record = RunRecord(run_id="r", started_at=0.0, status="INTERRUPTED", attempts=attempts, region="local-b")
    result = build_result(record, stores)
    assert (result["final_checkpoint"], result["final_step"]) == (b.checkpoint_url("r", 2650), 2650)
    # A step only the lost region holds is still the newest: named there (status says whose store).
    write_checkpoint(a, "r", 2700, attempt=2)
    assert build_result(record, stores)["final_checkpoint"] == a.checkpoint_url("r", 2700)
    # With no region to go by, the first store that holds it, as before.
    assert build_result(RunRecord(run_id="r", started_at=0.0), {"local-b": b, "local-a": a})["final_checkpoint"] == (
        a.checkpoint_url("r", 2700)
    )
