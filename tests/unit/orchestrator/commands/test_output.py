"""A reader that leaves: the printing commands end with 0, a run's stream discards the rest,
and neither raises. Streams here are fakes over a temporary file's descriptor; the
real pipe is tests/integration/orchestrator/commands/test_output.py."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.commands.output import Forgiving, discard, forgiving_stdout, main_quietly

pytestmark = pytest.mark.unit


class GoneReader(io.StringIO):
    """A text stream whose reader left: every write and flush fails until its descriptor is /dev/null."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd
        self.broken = True

    def fileno(self) -> int:
        return self.fd

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if self.broken and not os.path.samestat(os.fstat(self.fd), os.stat(os.devnull)):
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)

    def flush(self) -> None:
        if self.broken and not os.path.samestat(os.fstat(self.fd), os.stat(os.devnull)):
            raise BrokenPipeError(32, "Broken pipe")


@pytest.fixture
def gone(tmp_path: Path) -> Iterator[GoneReader]:
    fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT)
    stream = GoneReader(fd)
    yield stream
    os.close(fd)


def test_discard_points_the_descriptor_at_devnull(gone: GoneReader) -> None:
    discard(gone)
    assert os.path.samestat(os.fstat(gone.fd), os.stat(os.devnull))


def test_a_printing_command_whose_reader_left_ends_with_0(gone: GoneReader, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", gone)

    def main() -> int:
        print("a line nobody reads")
        return 3

    assert main_quietly(main) == 0
    gone.flush()  # what the interpreter does at exit: no longer fails


def test_the_status_stands_when_only_the_last_flush_fails(gone: GoneReader, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", gone)
    assert main_quietly(lambda: 1) == 1


def test_a_forgiving_stream_discards_the_rest_and_keeps_the_streams_answers(gone: GoneReader) -> None:
    out = Forgiving(gone)
    assert out.write("summary\n") == len("summary\n")
    out.flush()
    print("more", file=out)  # type: ignore[arg-type]
    assert out.isatty() is False and out.fileno() == gone.fd


def test_forgiving_stdout_is_undone_after_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    before = io.StringIO()
    monkeypatch.setattr(sys, "stdout", before)
    with forgiving_stdout():
        assert isinstance(sys.stdout, Forgiving)
        print("through")
    assert sys.stdout is before and before.getvalue() == "through\n"
