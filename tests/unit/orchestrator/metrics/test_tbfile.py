"""TensorBoard's file format as written here (orchestrator/metrics/tbfile.py): CRC-32C, the
framing of each record, the file's name, and a file read back record by record."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from orchestrator.metrics import tbfile
from tests.support.tbread import records

pytestmark = pytest.mark.unit


def test_crc32c_is_castagnolis_and_the_mask_is_tensorflows() -> None:
    assert tbfile.crc32c(b"123456789") == 0xE3069283
    crc = tbfile.crc32c(b"x")
    assert tbfile.masked_crc32c(b"x") == ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_a_record_is_its_length_its_lengths_crc_the_data_and_its_crc() -> None:
    rec = tbfile.tf_record(b"hello")
    length = struct.pack("<Q", 5)
    assert rec == length + struct.pack("<I", tbfile.masked_crc32c(length)) + b"hello" + struct.pack(
        "<I", tbfile.masked_crc32c(b"hello")
    )


def test_file_names_hold_tfevents_and_sort_by_start_time() -> None:
    early, late = tbfile.file_name(99.0, pid=7), tbfile.file_name(1000.0, pid=7)
    assert "tfevents" in early and early.endswith(".7") and early < late


def test_an_event_file_is_private_starts_with_its_version_and_reads_back(tmp_path: Path) -> None:
    out = tmp_path / "tb"
    f = tbfile.EventFile(str(out), 100.0)
    f.write(tbfile.scalar_event("loss", 0.5, 3, 101.0), tbfile.text_event("note", "hi", 3, 101.0))
    f.close()
    path = Path(f.path)
    assert oct(out.stat().st_mode & 0o777) == "0o700" and oct(path.stat().st_mode & 0o777) == "0o600"
    assert records(path) == [
        tbfile.version_event(100.0),
        tbfile.scalar_event("loss", 0.5, 3, 101.0),
        tbfile.text_event("note", "hi", 3, 101.0),
    ]
