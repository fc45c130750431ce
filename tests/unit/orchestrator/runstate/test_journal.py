"""The run journal: one JSON line per event, torn tails tolerated, secrets redacted."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import pytest

from orchestrator.runstate.journal import DamagedFile, Journal, json_lines, load_json, load_object, read_events, redact


def test_append_writes_one_json_line_per_event_with_ts_and_type(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "r" / "journal.jsonl"
    j = Journal(str(path))
    t0 = time.time()
    j.append("run_started", run_id="r", candidates=["a", "b"])
    j.append("transition", **{"from": "PENDING", "to": "PROVISIONING"})
    t1 = time.time()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events] == ["run_started", "transition"]
    assert all(t0 <= e["ts"] <= t1 for e in events)
    assert events[0]["candidates"] == ["a", "b"]
    assert (events[1]["from"], events[1]["to"]) == ("PENDING", "PROVISIONING")
    assert j.events() == events


def test_append_redacts_secrets_before_they_reach_the_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    Journal(str(path)).append("run_started", config={"storage": {"aws_secret_access_key": "SeCrEt"}})
    text = path.read_text(encoding="utf-8")
    assert "SeCrEt" not in text
    assert json.loads(text)["config"]["storage"]["aws_secret_access_key"] == "<redacted>"


def test_read_events_skips_a_torn_last_line_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    j = Journal(str(path))
    j.append("run_started")
    j.append("run_finished")
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"ts": 1.0, "type": "c", "fie')
    assert [e["type"] for e in read_events(str(path))] == ["run_started", "run_finished"]


def test_read_events_of_a_missing_journal_is_empty(tmp_path: Path) -> None:
    assert list(read_events(str(tmp_path / "nope.jsonl"))) == []


def test_event_appended_after_a_torn_last_line_is_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    j = Journal(str(path))
    j.append("run_key_created")
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"ts": 1.0, "type": "torn", "fie')
    j.append("run_started")
    assert [e["type"] for e in read_events(str(path))] == ["run_key_created", "run_started"]


def test_redact_replaces_secret_values_at_any_depth_and_keeps_the_rest() -> None:
    value = {
        "aws_secret_access_key": "s1",
        "step": 3,
        "cloud": {"creds": [{"token": "s2", "region": "a"}, {"db": {"password": "s3"}}]},
        "GCS_PRIVATE_KEY": "s4",
        "tuple": ({"refresh_token": "s5"},),
    }
    assert redact(value) == {
        "aws_secret_access_key": "<redacted>",
        "step": 3,
        "cloud": {"creds": [{"token": "<redacted>", "region": "a"}, {"db": {"password": "<redacted>"}}]},
        "GCS_PRIVATE_KEY": "<redacted>",
        "tuple": [{"refresh_token": "<redacted>"}],
    }
    assert value["cloud"]["creds"][0]["token"] == "s2"  # type: ignore[index]


def test_a_torn_last_line_is_skipped_and_nan_reads(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"ts": 1.0, "type": "a"}\n\n{"ts": 2.0, "type": "runtime.losses", "x": NaN}\n{"ts": 3.0, "ty')
    lines = list(json_lines(str(path)))
    assert [n for n, _ in lines] == [1, 3]
    assert math.isnan(lines[1][1]["x"])


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"[" * 100_000 + b"\n", "line 2 nests too deep"),
        (b'{"n": ' + b"9" * 5000 + b"}\n", "line 2 holds an integer"),
        (b'{"s": "\xff"}\n', "line 2 is not text"),
    ],
)
def test_a_line_beyond_the_codecs_bounds_is_damage(tmp_path: Path, data: bytes, words: str) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b'{"ts": 1.0, "type": "a"}\n' + data)
    with pytest.raises(DamagedFile, match=words):
        list(json_lines(str(path)))


def test_load_json_names_the_damage(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_bytes(b'{"a": 1')
    with pytest.raises(DamagedFile, match=r"is not valid JSON .*cut short"):
        load_json(str(path))
    path.write_bytes(b'{"loss": NaN}')
    assert math.isnan(load_json(str(path))["loss"])


def test_load_object_refuses_json_that_is_no_object(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"job": {}}')
    assert load_object(str(path)) == {"job": {}}
    for data, kind in ((b"[1, 2]", "list"), (b"3", "int"), (b'"a"', "str"), (b"null", "NoneType")):
        path.write_bytes(data)
        with pytest.raises(DamagedFile, match=f"config.json: is {kind}, not a JSON object"):
            load_object(str(path))


def test_a_json_file_larger_than_any_we_write_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_bytes(b"")
    os.truncate(path, 1 << 40)  # sparse: a terabyte that costs nothing
    with pytest.raises(DamagedFile, match=r"result\.json: holds more than"):
        load_json(str(path))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("shape", ["fifo", "link", "folder"])
def test_the_journal_is_neither_read_nor_written_through_what_is_no_regular_file(tmp_path: Path, shape: str) -> None:
    outside = tmp_path / "outside.jsonl"
    path = tmp_path / "run" / "journal.jsonl"
    path.parent.mkdir()
    if shape == "fifo":
        os.mkfifo(path)
    elif shape == "link":
        path.symlink_to(outside)
    else:
        path.mkdir()
    with pytest.raises(DamagedFile, match="not a regular file"):
        list(read_events(str(path)))
    with pytest.raises(DamagedFile, match="not a regular file"):
        Journal(str(path)).append("run_started")
    assert not outside.exists(), "an append went through the link"
