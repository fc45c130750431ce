"""A run's TensorBoard files read back as TensorBoard reads them, with tensorboardX's own
proto classes and CRC (nothing of orchestrator/metrics/tbfile.py's): every record's frame is
checked, and a SessionLog START drops what the run wrote at its step or later before it
(TensorBoard's purge of a restarted job's orphaned points)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: tensorboardX costs a second to import
    from tensorboardX.proto.event_pb2 import Event


def records(path: Path) -> list[bytes]:
    from tensorboardX.record_writer import masked_crc32c

    data = path.read_bytes()
    out, at = [], 0
    while at < len(data):
        header = data[at : at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8 : at + 12])
        assert length_crc == masked_crc32c(header), f"{path.name}: bad length CRC at {at}"
        body = data[at + 12 : at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length : at + 16 + length])
        assert body_crc == masked_crc32c(body), f"{path.name}: bad data CRC at {at}"
        out.append(body)
        at += 16 + length
    return out


def event_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if "tfevents" in p.name)


def events(folder: Path) -> list[Event]:
    """Every event of every file, files in name order (TensorBoard's), each file's version first."""
    from tensorboardX.proto.event_pb2 import Event

    out = []
    for path in event_files(folder):
        for n, body in enumerate(records(path)):
            event = Event()
            event.ParseFromString(body)
            if n == 0:
                assert event.file_version == "brain.Event:2", path.name
            out.append(event)
    return out


@dataclass
class Shown:
    """What TensorBoard keeps: per tag, (step, value) in the order written, after purges."""

    scalars: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    texts: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    restarts: list[int] = field(default_factory=list)

    def steps(self, tag: str) -> list[int]:
        return [s for s, _ in self.scalars.get(tag, [])]


def shown(folder: Path) -> Shown:
    from tensorboardX.proto.event_pb2 import SessionLog

    out = Shown()
    for event in events(folder):
        if event.HasField("session_log") and event.session_log.status == SessionLog.START:
            out.restarts.append(event.step)
            for series in (*out.scalars.values(), *out.texts.values()):
                series[:] = [p for p in series if p[0] < event.step]
        for value in event.summary.value:
            if value.HasField("tensor"):
                assert value.metadata.plugin_data.plugin_name == "text", value.tag
                out.texts.setdefault(value.tag, []).append((event.step, value.tensor.string_val[0].decode()))
            else:
                out.scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out
