"""The ranks' log files: how each Ray Train worker's output is named on its node, how
a kept copy of one is capped, and how a node's files travel to the controller.

Each worker appends its stdout and stderr to ``rank-<R>.log`` in the cluster's log
folder (the runtime spec's ``log_dir``, on the node). Before the cluster is torn
down, the provider keeps a copy of each in the attempt's folder of the run: the local
provider copies them (``keep``), SkyPilot runs ``python -m orchestrator.wire.logfiles
pack DIR`` on each node through ssh and reads the tar stream it prints (``unpack``,
which trusts nothing in it: member names, types and sizes are checked).

A kept copy holds at most ``CAP_BYTES`` of a rank's output: its first ``HEAD_BYTES``
(the start-up, the first error) and its last bytes (how it ended), with one line where
the middle was cut saying how much.
"""

from __future__ import annotations

import io
import os
import re
import sys
import tarfile
from dataclasses import dataclass

from recovery.fsio import open_regular

LOG_DIR = "logs"
RANK_FILE = re.compile(r"rank-(0|[1-9][0-9]{0,5})\.log")
CAP_BYTES = 8 * 1024 * 1024
HEAD_BYTES = 1024 * 1024
# More rank files than any cluster has ranks: what a stream holds beyond is refused.
MAX_FILES = 4096
# Where the stream starts: whatever a login shell printed before it is passed over.
STREAM_MARK = b"ORCHESTRATOR-RANK-LOGS\n"
# Each member's bytes cut by the cap on the node, in its PAX header.
CUT_HEADER = "ORCHESTRATOR.cut"


@dataclass(frozen=True)
class KeptLogs:
    """What was kept of a cluster's rank logs: the ranks, the bytes written, the bytes
    cut by the cap, and why nothing (or not everything) was kept (None: all of it)."""

    ranks: tuple[int, ...] = ()
    bytes: int = 0
    cut: int = 0
    error: str | None = None


def rank_file(rank: int) -> str:
    return f"rank-{int(rank)}.log"


def rank_of(name: str) -> int | None:
    """The rank a file name is the log of; None for any other name."""
    m = RANK_FILE.fullmatch(name)
    return None if m is None else int(m.group(1))


def cut_line(cut: int) -> bytes:
    return (
        f"\n[orchestrator: {cut} bytes cut here; a kept log holds its first {HEAD_BYTES // 1024} KiB "
        f"and its last {(CAP_BYTES - HEAD_BYTES) // 1024} KiB]\n"
    ).encode()


def capped(data: bytes, cap: int = CAP_BYTES, head: int = HEAD_BYTES) -> tuple[bytes, int]:
    """``data`` cut to its first ``head`` and last ``cap - head`` bytes, with the cut
    marked; and how many bytes were cut (0: it was kept whole)."""
    if len(data) <= cap:
        return data, 0
    cut = len(data) - cap
    return data[:head] + cut_line(cut) + data[len(data) - (cap - head) :], cut


def read_capped(path: str, cap: int = CAP_BYTES, head: int = HEAD_BYTES) -> tuple[bytes, int]:
    """A file as ``capped`` keeps it, reading no more of it than is kept; UnsafeFile (an
    OSError) for a FIFO, a link or anything else that is no regular file."""
    with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= cap:
            return fh.read(cap), 0
        first = fh.read(head)
        fh.seek(size - (cap - head))
        return first + cut_line(size - cap) + fh.read(cap - head), size - cap


def rank_files(log_dir: str) -> dict[int, str]:
    """The rank files in ``log_dir``: rank -> path; empty when there is no such folder."""
    try:
        names = os.listdir(log_dir)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    out = {}
    for name in names:
        rank = rank_of(name)
        path = os.path.join(log_dir, name)
        if rank is not None and os.path.isfile(path) and not os.path.islink(path):
            out[rank] = path
    return dict(sorted(out.items()))


def write_kept(dest_dir: str, files: dict[int, bytes], cut: int = 0) -> KeptLogs:
    """Each rank's output, capped already, as ``dest_dir/rank-<R>.log`` (0600); ``cut``:
    the bytes the caps cut."""
    if not files:
        return KeptLogs(cut=cut)
    os.makedirs(dest_dir, exist_ok=True)
    for rank, data in sorted(files.items()):
        # Never through a link planted under the name (UnsafeFile: what was kept says why).
        fd = open_regular(os.path.join(dest_dir, rank_file(rank)), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    return KeptLogs(ranks=tuple(sorted(files)), bytes=sum(map(len, files.values())), cut=cut)


def keep(log_dir: str, dest_dir: str) -> KeptLogs:
    """Copy the rank files of ``log_dir`` (a folder of this machine) to ``dest_dir``, capped."""
    files: dict[int, bytes] = {}
    cut = 0
    for rank, path in rank_files(log_dir).items():
        try:
            files[rank], dropped = read_capped(path)
        except OSError:
            continue  # gone between the listing and the read: nothing to keep of it
        cut += dropped
    return write_kept(dest_dir, files, cut)


def pack(log_dir: str, out: io.BufferedIOBase | io.RawIOBase) -> None:
    """The rank files of ``log_dir``, capped, as a tar stream on ``out`` (run on a node),
    after ``STREAM_MARK``; each member says in its header how much the cap cut."""
    out.write(STREAM_MARK)
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for rank, path in rank_files(log_dir).items():
            try:
                data, cut = read_capped(path)
            except OSError:
                continue
            info = tarfile.TarInfo(rank_file(rank))
            info.size = len(data)
            info.mode = 0o600
            info.pax_headers = {CUT_HEADER: str(cut)}
            tar.addfile(info, io.BytesIO(data))


def unpack(stream: bytes) -> dict[int, tuple[bytes, int]]:
    """The rank files of a stream ``pack`` wrote, each with the bytes its cap cut;
    ValueError (one line) for anything else: no mark, a member that is no regular
    file, has another name, or is larger than the cap."""
    start = stream.find(STREAM_MARK)
    if start < 0:
        raise ValueError("the log stream has no start mark: the node's command printed something else")
    limit = CAP_BYTES + len(cut_line(10**15))
    out: dict[int, tuple[bytes, int]] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(stream[start + len(STREAM_MARK) :]), mode="r|") as tar:
            for member in tar:
                rank = rank_of(member.name)
                if rank is None or not member.isreg():
                    raise ValueError(f"the log stream holds {member.name[:80]!r}, which is no rank's log file")
                if member.size > limit:
                    raise ValueError(f"the log stream's {member.name} is {member.size} bytes, over the cap")
                if rank in out or len(out) >= MAX_FILES:
                    raise ValueError(f"the log stream holds {member.name} twice, or too many files")
                cut = member.pax_headers.get(CUT_HEADER, "0")
                if not cut.isascii() or not cut.isdigit() or len(cut) > 18:
                    raise ValueError(f"the log stream's {member.name} says {cut[:20]!r} bytes were cut")
                fh = tar.extractfile(member)
                out[rank] = (fh.read() if fh is not None else b"", int(cut))
    except tarfile.TarError as exc:
        raise ValueError(f"the log stream is no tar stream ({exc})") from None
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "pack":
        print("usage: python -m orchestrator.wire.logfiles pack LOG_DIR", file=sys.stderr)
        return 2
    pack(argv[1], sys.stdout.buffer)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
