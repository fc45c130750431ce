"""The ranks' log files (orchestrator/wire/logfiles.py): their names, the cap of a kept copy, the
tar stream a node's files travel in and what it refuses."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from orchestrator.wire import logfiles
from orchestrator.wire.logfiles import CAP_BYTES, HEAD_BYTES, KeptLogs, capped, rank_of

pytestmark = pytest.mark.unit


def test_a_rank_file_is_named_after_its_rank_and_nothing_else_reads_as_one() -> None:
    assert logfiles.rank_file(12) == "rank-12.log" and rank_of("rank-12.log") == 12
    for name in ("rank-01.log", "rank--1.log", "rank-1.log.1", "../rank-1.log", "rank-1234567.log", "driver.log"):
        assert rank_of(name) is None, name


def test_a_log_under_the_cap_is_kept_whole() -> None:
    data = b"line\n" * 1000
    assert capped(data) == (data, 0)
    assert capped(b"x" * CAP_BYTES) == (b"x" * CAP_BYTES, 0)


def test_a_log_over_the_cap_keeps_its_head_and_tail_and_says_how_much_was_cut() -> None:
    data = b"H" * HEAD_BYTES + b"M" * 5000 + b"T" * (CAP_BYTES - HEAD_BYTES)
    kept, cut = capped(data)
    assert cut == 5000
    assert kept.startswith(b"H" * HEAD_BYTES + b"\n[orchestrator: 5000 bytes cut here;")
    assert kept.endswith(b"]\n" + b"T" * (CAP_BYTES - HEAD_BYTES)) and b"M" not in kept


def test_a_file_is_read_capped_as_its_bytes_would_be(tmp_path: Path) -> None:
    data = os.urandom(CAP_BYTES + 12345)
    (tmp_path / "rank-0.log").write_bytes(data)
    assert logfiles.read_capped(str(tmp_path / "rank-0.log")) == capped(data)


def test_keep_copies_rank_files_only_each_capped_and_private(tmp_path: Path) -> None:
    src, dest = tmp_path / "node", tmp_path / "run" / "attempts" / "g1"
    src.mkdir()
    (src / "rank-0.log").write_bytes(b"hello from 0\n")
    (src / "rank-1.log").write_bytes(b"x" * (CAP_BYTES + 10))
    (src / "worker-abc.out").write_text("not ours")
    (src / "rank-2.log").symlink_to(src / "worker-abc.out")
    kept = logfiles.keep(str(src), str(dest))
    assert kept.ranks == (0, 1) and kept.cut == 10 and kept.error is None
    assert sorted(os.listdir(dest)) == ["rank-0.log", "rank-1.log"]
    assert (dest / "rank-0.log").read_bytes() == b"hello from 0\n"
    assert (dest / "rank-1.log").stat().st_mode & 0o777 == 0o600
    assert kept.bytes == sum(p.stat().st_size for p in dest.iterdir())
    assert logfiles.keep(str(tmp_path / "none"), str(tmp_path / "d2")) == KeptLogs()
    assert not (tmp_path / "d2").exists()


def test_a_nodes_files_travel_as_a_tar_stream_and_come_back_the_same(tmp_path: Path) -> None:
    (tmp_path / "rank-0.log").write_bytes(b"zero\n")
    (tmp_path / "rank-3.log").write_bytes(b"t" * (CAP_BYTES + 1))
    (tmp_path / "other.txt").write_text("left out")
    out = io.BytesIO(b"Welcome to the node! (a login shell's greeting)\n")
    out.seek(0, io.SEEK_END)
    logfiles.pack(str(tmp_path), out)
    back = logfiles.unpack(out.getvalue())
    assert back == {0: (b"zero\n", 0), 3: capped(b"t" * (CAP_BYTES + 1))}
    empty = io.BytesIO()
    logfiles.pack(str(tmp_path / "no-such-folder"), empty)
    assert logfiles.unpack(empty.getvalue()) == {}


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buf = io.BytesIO(logfiles.STREAM_MARK)
    buf.seek(0, io.SEEK_END)
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buf.getvalue()


def _member(
    name: str, data: bytes = b"x", kind: bytes = tarfile.REGTYPE, cut: str = "0"
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.pax_headers = {logfiles.CUT_HEADER: cut}
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    if kind == tarfile.SYMTYPE:
        info.linkname = "/etc/passwd"
    return info, data


@pytest.mark.parametrize(
    ("stream", "why"),
    [
        (_tar(_member("../rank-0.log")), "no rank's log file"),
        (_tar(_member("/tmp/rank-0.log")), "no rank's log file"),
        (_tar(_member("rank-0.log", kind=tarfile.SYMTYPE)), "no rank's log file"),
        (_tar(_member("rank-0.log"), _member("rank-0.log")), "twice"),
        (_tar(_member("rank-0.log", b"y" * (CAP_BYTES + 200))), "over the cap"),
        (_tar(_member("rank-0.log", cut="-5")), "bytes were cut"),
        (logfiles.STREAM_MARK + b"\x00garbage" * 100, "no tar stream"),
        (b"no mark at all", "no start mark"),
    ],
    ids=["parent", "absolute", "symlink", "twice", "oversize", "cut", "garbage", "nomark"],
)
def test_a_stream_that_is_not_what_pack_writes_is_refused_in_one_line(stream: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why) as err:
        logfiles.unpack(stream)
    assert "\n" not in str(err.value)


@pytest.mark.timeout(30)
def test_a_capped_read_of_a_fifo_or_a_link_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "rank-0.log")
    (tmp_path / "rank-1.log").symlink_to("/dev/zero")
    for name in ("rank-0.log", "rank-1.log"):
        with pytest.raises(OSError, match="not a regular file"):
            logfiles.read_capped(str(tmp_path / name))


def test_a_kept_copy_is_never_written_through_a_link_planted_under_its_name(tmp_path: Path) -> None:
    dest = tmp_path / "attempts" / "g1"
    dest.mkdir(parents=True)
    theirs = tmp_path / "theirs"
    theirs.write_bytes(b"theirs")
    (dest / "rank-0.log").symlink_to(theirs)
    with pytest.raises(OSError, match="a symlink, not a regular file"):
        logfiles.write_kept(str(dest), {0: b"rank zero"})
    assert theirs.read_bytes() == b"theirs"
