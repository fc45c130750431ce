"""TensorBoard's event files: TFRecord-framed ``Event`` protocol buffers, encoded here.

An event file is a sequence of records (length, masked CRC32C of the length, the
bytes, their masked CRC32C), each an ``Event`` message: the file's version first,
then summaries (a scalar's ``simple_value``, a text's string tensor for the text
plugin) and ``SessionLog`` START markers, which tell TensorBoard to forget what a
run wrote at or after their step (a restart from an older checkpoint).

The few messages the controller writes are encoded by hand rather than through
tensorboardX: importing tensorboardX imports torch (about 3 s of CPU), which the
controller otherwise never loads. The tests read every message back with
tensorboardX's own proto classes (tensorboardX/proto/event.proto, summary.proto).
"""

from __future__ import annotations

import os
import socket
import struct

FILE_VERSION = "brain.Event:2"
# The text plugin's metadata: plugin "text", content TextPluginData{version: 0} (empty).
TEXT_PLUGIN = "text"
DT_STRING = 7  # tensorflow.DataType
SESSION_START = 1  # SessionLog.SessionStatus.START

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord frames use it."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tf_record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


# --- protocol buffer wire format (the fields below only) -----------------------------------


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # an int64's two's complement, as protobuf writes a negative one
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes_field(field: int, data: bytes) -> bytes:
    return _key(field, _BYTES) + _varint(len(data)) + data


def _int_field(field: int, value: int) -> bytes:
    return _key(field, _VARINT) + _varint(value) if value else b""


def _event(wall_time: float, step: int, what: bytes) -> bytes:
    return _key(1, _FIXED64) + struct.pack("<d", wall_time) + _int_field(2, step) + what


def version_event(wall_time: float) -> bytes:
    """The first record of every file: Event{wall_time, file_version}."""
    return _event(wall_time, 0, _bytes_field(3, FILE_VERSION.encode()))


def scalar_event(tag: str, value: float, step: int, wall_time: float) -> bytes:
    """Event{summary: Summary{value: [Value{tag, simple_value}]}} (a float32, as TensorBoard keeps it)."""
    summary_value = _bytes_field(1, tag.encode()) + _key(2, _FIXED32) + struct.pack("<f", _float32(value))
    return _event(wall_time, step, _bytes_field(5, _bytes_field(1, summary_value)))


def text_event(tag: str, text: str, step: int, wall_time: float) -> bytes:
    """A text summary (Markdown, as TensorBoard's text plugin renders it): a string
    tensor of shape [1] with the text plugin's metadata."""
    metadata = _bytes_field(1, _bytes_field(1, TEXT_PLUGIN.encode()))
    shape = _bytes_field(2, _int_field(1, 1))  # TensorShapeProto{dim: [Dim{size: 1}]}
    tensor = _int_field(1, DT_STRING) + _bytes_field(2, shape) + _bytes_field(8, text.encode())
    summary_value = _bytes_field(1, tag.encode()) + _bytes_field(8, tensor) + _bytes_field(9, metadata)
    return _event(wall_time, step, _bytes_field(5, _bytes_field(1, summary_value)))


def restart_event(step: int, wall_time: float) -> bytes:
    """Event{step, session_log: SessionLog{status: START}}: TensorBoard drops what the run
    wrote at ``step`` or later before this record (its own way of showing a job that
    restarted from a checkpoint without a zigzag)."""
    return _event(wall_time, step, _bytes_field(7, _int_field(1, SESSION_START)))


def _float32(value: float) -> float:
    # struct refuses a finite double beyond float32's range; TensorBoard would show inf.
    try:
        struct.pack("<f", value)
    except OverflowError:
        return float("inf") if value > 0 else float("-inf")
    return value


# --- the file ----------------------------------------------------------------------------------


def file_name(wall_time: float, pid: int | None = None) -> str:
    """TensorBoard reads files whose name holds ``tfevents``, in name order: the start
    time first, so a resumed controller's file comes after the one before it."""
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())[:64] or "host"
    return f"events.out.tfevents.{int(wall_time):010d}.{host}.{pid or os.getpid()}"


class EventFile:
    """One new event file in ``folder`` (created 0700 if missing; the file 0600), its
    version record first. ``write`` appends records; the caller decides when to flush."""

    def __init__(self, folder: str, wall_time: float) -> None:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        self.path = os.path.join(folder, file_name(wall_time))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        self._fh = os.fdopen(fd, "ab")
        self.write(version_event(wall_time))

    def write(self, *events: bytes) -> None:
        self._fh.write(b"".join(tf_record(e) for e in events))

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
