"""The user's control key (``cloud.control_key``): where a controller finds the key from
which the run's secret is derived (recovery/signing.py, ``secret_from_key``), so that a
controller on another machine, given the same key, can take a run over from the control
store without the secret ever being stored there.

Three sources, named in the config (the key itself never is):

- ``env:NAME``: an environment variable (default ``env:ORCHESTRATOR_CONTROL_KEY``),
  removed from the controller's environment once read, so that no process it starts (a
  Ray cluster, the user's code) inherits it;
- ``file:PATH``: a file only its owner can read (mode 0600), as ``run.secret`` is;
- ``cmd:COMMAND``: a command that prints the key, e.g. a cloud secret manager's CLI
  (``cmd:aws secretsmanager get-secret-value --secret-id orch --query SecretString
  --output text``), run without a shell, for at most 30 s; its stderr is never shown
  (a secret manager's message may quote the secret), only its exit status.

A key is 32 to 4096 characters (``openssl rand -hex 32`` prints one); surrounding white
space is dropped. No key (the variable unset): the run's secret is random, as without a
control store, and only this machine can resume the run. A key that is blank (a variable
set to nothing), too short or too long is refused in one line, never cut or taken as no
key; the line names the source, never any part of the key or of what a command printed.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shlex
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from typing import IO

DEFAULT = "env:ORCHESTRATOR_CONTROL_KEY"
KINDS = ("env", "file", "cmd")
MIN_CHARS = 32
MAX_BYTES = 4096
CMD_TIMEOUT_S = 30.0


class ControlKeyError(RuntimeError):
    """The control key cannot be had from its source; one line naming the source, never the key."""


@dataclass(frozen=True)
class KeySource:
    kind: str
    ref: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.ref}"

    def named(self) -> str:
        """The source as a message names it: a command by its first word, since the rest of
        its line (an argument, a secret's name) is no message's business."""
        if self.kind != "cmd":
            return str(self)
        words = shlex.split(self.ref)
        return f"cmd:{words[0][:80]}" + (" ..." if len(words) > 1 else "")


def parse_source(spec: str) -> KeySource:
    """``env:NAME`` | ``file:PATH`` | ``cmd:COMMAND``; ValueError (one line) otherwise."""
    kind, sep, ref = spec.partition(":")
    if not sep or kind not in KINDS or not ref.strip():
        raise ValueError(f"got {spec!r}; expected env:VARNAME, file:PATH or cmd:COMMAND")
    if kind == "env" and not ref.replace("_", "").isalnum():
        raise ValueError(f"got {spec!r}; an environment variable's name is letters, digits and _")
    if kind == "cmd":
        try:
            shlex.split(ref)
        except ValueError as exc:
            raise ValueError(f"got {spec!r}; the command does not parse: {exc}") from None
    return KeySource(kind, ref.strip())


def forget_key(spec: str, environ: dict[str, str] | None = None) -> None:
    """A controller that uses no control key (no control store) still takes an ``env:``
    key out of its environment: no cluster or workload it starts may inherit it."""
    try:
        source = parse_source(spec)
    except ValueError:
        return
    if source.kind == "env":
        (os.environ if environ is None else environ).pop(source.ref, None)


def key_for(store: str | None, spec: str, environ: dict[str, str] | None = None) -> bytes | None:
    """The key a controller of a run with control store ``store`` uses, read once, before it
    prints or writes anything (a bad key is one line and nothing else): None without a control
    store (an ``env:`` key taken out of the environment all the same) or with an unset
    ``env:`` variable. ControlKeyError otherwise, as read_key."""
    if not store:
        forget_key(spec, environ)
        return None
    return read_key(spec, environ)


def checked(raw: bytes, source: KeySource) -> bytes:
    """The key as used: white space stripped, MIN_CHARS to MAX_BYTES long. Never cut: a key
    cut short would be another key, and a blank one no key at all (a run no other machine
    could take over), so both are refused rather than used."""
    size = f"a control key is {MIN_CHARS} to {MAX_BYTES} characters (make one with: openssl rand -hex 32)"
    if len(raw) > MAX_BYTES:
        raise ControlKeyError(f"cloud.control_key: {source.named()} gives more than {MAX_BYTES} bytes; {size}")
    key = raw.strip()
    if not key:
        raise ControlKeyError(f"cloud.control_key: {source.named()} gives a blank key (only white space); {size}")
    if len(key) < MIN_CHARS:
        raise ControlKeyError(f"cloud.control_key: {source.named()} gives {len(key)} characters; {size}")
    return key


def read_key(spec: str, environ: dict[str, str] | None = None) -> bytes | None:
    """The control key from ``spec``, or None when an ``env:`` source is unset (no key).
    ControlKeyError (one line naming the source, never the key) when the source cannot
    give one: a variable set but blank, a file or command that gives none, too short a key
    or too long a one. An ``env:`` variable is taken out of the environment either way."""
    source = parse_source(spec)
    env = os.environ if environ is None else environ
    if source.kind == "env":
        value = env.pop(source.ref, None)
        if value is None:
            return None
        if not value.strip():
            # Set but blank is a mistake (an empty secret pasted), not a choice of no key:
            # taken as none, the run could never be taken over, and nothing would say so.
            raise ControlKeyError(
                f"cloud.control_key: {source} is set but blank; give it a key of {MIN_CHARS} to {MAX_BYTES} "
                f"characters (openssl rand -hex 32), or unset it for no key (only this machine resumes the run)"
            )
        return checked(os.fsencode(value), source)
    if source.kind == "file":
        return checked(_read_file(os.path.expanduser(source.ref), source), source)
    return checked(_run(source), source)


def _read_file(path: str, source: KeySource) -> bytes:
    """At most MAX_BYTES + 1 bytes of the file (one more than a key may be: checked refuses
    it), opened without blocking (a FIFO never waits) and checked on what was opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ControlKeyError(f"cloud.control_key: cannot read {source}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ControlKeyError(f"cloud.control_key: {path} is not a regular file; give a file that holds the key")
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise ControlKeyError(
                f"cloud.control_key: {path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}); chmod 600 it"
            )
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ControlKeyError(f"cloud.control_key: cannot read {source}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _run(source: KeySource) -> bytes:
    """What the command prints, at most MAX_BYTES + 1 bytes of it, within CMD_TIMEOUT_S.
    Its stderr goes nowhere: a secret manager's message may quote the secret, so a command
    that fails is told by its exit status alone, and one that prints too much is stopped."""
    argv = shlex.split(source.ref)
    name = source.named()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stopped whole, children too
        )
    except FileNotFoundError:
        raise ControlKeyError(f"cloud.control_key: {argv[0][:80]!r} (from cmd:) is not a command here") from None
    except OSError as exc:
        raise ControlKeyError(f"cloud.control_key: cannot run {name}: {exc.strerror or exc}") from None
    assert proc.stdout is not None
    deadline = time.monotonic() + CMD_TIMEOUT_S
    late = f"cloud.control_key: {name} printed no key within {CMD_TIMEOUT_S:.0f} s"
    try:
        out, ended = _bounded_read(proc, proc.stdout, deadline)
        if not ended:
            raise ControlKeyError(late)
        if len(out) > MAX_BYTES:
            return out  # checked() refuses it, by its size
        code = _wait(proc, deadline)
        if code is None:
            raise ControlKeyError(late)
        if code < 0:
            raise ControlKeyError(f"cloud.control_key: {name} was killed by signal {-code}; its output is not shown")
        if code != 0:
            raise ControlKeyError(
                f"cloud.control_key: {name} exited {code}; its output is not shown (it may hold the key): "
                f"run the command yourself to see why"
            )
        if not out.strip():
            raise ControlKeyError(
                f"cloud.control_key: {name} exited 0 and printed no key (nothing, or only white space); "
                "expected it to print the key"
            )
        return out
    finally:
        _stop(proc)


def _bounded_read(proc: subprocess.Popen[bytes], pipe: IO[bytes], deadline: float) -> tuple[bytes, bool]:
    """What ``pipe`` gives until it ends, more than MAX_BYTES have come, or ``deadline``;
    and whether it ended (or filled) before the deadline. A command that prints without end
    is read no further than a key may be long."""
    out = bytearray()
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while len(out) <= MAX_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(out), False
            if not sel.select(min(left, 0.5)):
                if proc.poll() is not None and not _drain(fd, out):
                    # Exited, and what it started holds the pipe open: what it printed is all.
                    return bytes(out), True
                continue
            try:
                chunk = os.read(fd, MAX_BYTES + 1 - len(out))
            except BlockingIOError:
                continue
            if not chunk:
                return bytes(out), True
            out += chunk
    return bytes(out), True


def _drain(fd: int, out: bytearray) -> bool:
    """Whatever is waiting in the pipe, added to ``out``; whether there was any."""
    try:
        chunk = os.read(fd, MAX_BYTES + 1 - len(out))
    except BlockingIOError:
        return False
    out += chunk
    return bool(chunk)


def _wait(proc: subprocess.Popen[bytes], deadline: float) -> int | None:
    try:
        return proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """The command's process group killed if it still runs (its pipe closed either way)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
