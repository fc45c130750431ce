"""A run's files as readers meet them: damage is a DamagedFile naming the file (one line
for the user), torn journal tails are still skipped, and preflight names the key at fault."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.preflight import PreflightError, probe
from orchestrator.runstate.journal import DamagedFile, Journal, load_json, read_events
from orchestrator.runstate.losses import append_loss, read_loss
from orchestrator.runstate.result import read_result

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


def test_loss_points_that_are_not_ours_are_left_out_of_the_plot(tmp_path: Path) -> None:
    append_loss(str(tmp_path), generation=1, region="a", step=1, loss=0.5)
    with (tmp_path / "loss.jsonl").open("a") as fh:
        fh.write('[1]\n{"generation": "x", "region": "a", "step": 2, "loss": 1}\n')
    assert [p["step"] for p in read_loss(str(tmp_path))] == [1]


# --- preflight names the key at fault ---------------------------------------------------------


class FailingFs:
    protocol = "s3"
    async_impl = False

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def pipe_file(self, path: str, data: bytes, **kw: object) -> None:
        raise self.exc


@pytest.mark.parametrize(
    ("exc", "options", "key"),
    [
        (ConnectionRefusedError("refused"), {"endpoint_url": "http://127.0.0.1:9"}, "R.storage_options.endpoint_url"),
        (TypeError("unexpected keyword argument 'bogus'"), {"bogus": 1}, "R.storage_options"),
        (PermissionError("denied"), {"endpoint_url": "http://127.0.0.1:9"}, "R.store"),
        (ConnectionRefusedError("refused"), {}, "R.store"),
    ],
)
def test_preflight_blames_the_options_or_the_url(
    monkeypatch: pytest.MonkeyPatch, exc: Exception, options: dict[str, object], key: str
) -> None:
    import orchestrator.config.preflight as pf

    monkeypatch.setattr(pf, "open_fs", lambda url, opts: (FailingFs(exc), "b/x"))
    with pytest.raises(PreflightError) as info:
        probe("R.store", "R.storage_options", "s3://b/x", options)
    assert str(info.value).startswith(f"{key}: ")


def test_preflight_of_a_store_under_a_file_names_the_store(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(PreflightError) as info:
        probe("R.store", "R.storage_options", f"file://{tmp_path}/f/store", {})
    assert str(info.value).startswith("R.store: ")
