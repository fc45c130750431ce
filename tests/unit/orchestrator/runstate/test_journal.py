"""The journal's lines through the codec: a torn line is skipped, a hostile one is damage."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from orchestrator.runstate.journal import DamagedFile, json_lines, load_json

pytestmark = pytest.mark.unit


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
