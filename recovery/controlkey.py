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
  --output text``), run without a shell, for at most 30 s.

A key is at least 32 characters (``openssl rand -hex 32`` prints one); surrounding
white space is dropped. No key (the variable unset): the run's secret is random, as
without a control store, and only this machine can resume the run.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
from dataclasses import dataclass

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


def checked(raw: bytes, source: KeySource) -> bytes:
    """The key as used: white space stripped, at least MIN_CHARS long."""
    key = raw.strip()
    if len(key) < MIN_CHARS:
        raise ControlKeyError(
            f"cloud.control_key: {source} gives {len(key)} characters; a control key is at least "
            f"{MIN_CHARS} (make one with: openssl rand -hex 32)"
        )
    return key


def read_key(spec: str, environ: dict[str, str] | None = None) -> bytes | None:
    """The control key from ``spec``, or None when an ``env:`` source is unset (no key).
    ControlKeyError when a file or command named cannot give one."""
    source = parse_source(spec)
    env = os.environ if environ is None else environ
    if source.kind == "env":
        value = env.pop(source.ref, None)
        return None if value is None or not value.strip() else checked(value.encode(), source)
    if source.kind == "file":
        return checked(_read_file(os.path.expanduser(source.ref), source), source)
    return checked(_run(source), source)


def _read_file(path: str, source: KeySource) -> bytes:
    try:
        st = os.stat(path)
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise ControlKeyError(
                f"cloud.control_key: {path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}); chmod 600 it"
            )
        if not stat.S_ISREG(st.st_mode):
            raise ControlKeyError(f"cloud.control_key: {path} is not a regular file")
        with open(path, "rb") as fh:
            return fh.read(MAX_BYTES + 1)[:MAX_BYTES]
    except OSError as exc:
        raise ControlKeyError(f"cloud.control_key: cannot read {source}: {exc.strerror or exc}") from None


def _run(source: KeySource) -> bytes:
    argv = shlex.split(source.ref)
    try:
        done = subprocess.run(argv, capture_output=True, timeout=CMD_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ControlKeyError(f"cloud.control_key: {argv[0]!r} (from {source.kind}:) is not a command here") from None
    except subprocess.TimeoutExpired:
        raise ControlKeyError(f"cloud.control_key: {argv[0]!r} printed no key within {CMD_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        # Its stderr may say why; never its stdout, which may hold a key.
        why = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        raise ControlKeyError(f"cloud.control_key: {argv[0]!r} exited {done.returncode}: {why[0][:200]}")
    return done.stdout[:MAX_BYTES]
