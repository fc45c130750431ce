"""One controller per run, on any machine: a lease in the control store.

``<control_store>/<run_id>/lease.json`` names the controller that drives the run: its
controller generation (1 for the run's first controller, one more for each controller
that took the run since), a random token of its own, its host and pid, and until when
the lease holds (``expires_at``). Authenticated with the run's state key
(recovery/signing.py, ``derive_state_key``): a lease that does not verify is nobody's.

- **Taking** (a new controller, ``action=resume``): refused while another controller's
  lease holds; otherwise the next generation N is claimed by a conditional write of
  ``claims/c<N>`` (create only if absent: ``O_EXCL`` on a folder, ``If-None-Match: *`` on
  S3, ``ifGenerationMatch=0`` on GCS), so of two controllers taking the same lapsed lease
  at the same instant exactly one gets N; the lease is then written and read back after a
  short settle (on a store without conditional writes, that read back alone tells the
  two apart: the last write wins).
- **Holding**: renewed every heartbeat interval. The holder trusts its lease only until
  ``ttl_s - margin`` after the read that confirmed it (a monotonic clock, so a process
  stopped for a while, SIGSTOP, a suspended VM, knows it was), and before any act (a
  journal line, a cluster launched or torn down) past that it reads the lease again.
  Another's token there: the controller stands down, acting on nothing. A store it
  cannot reach for a whole lease: it stands down too, to be restarted, since another
  machine may hold the lease by then.
- A taker takes a lapsed lease only after its ``expires_at`` by its own clock: the
  machines' clocks must agree within ``margin`` (NTP does far better).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from recovery.fsio import TooLarge, is_local, read_capped, write_bytes
from recovery.sealed import seal, unseal

LEASE_NAME = "lease.json"
CLAIMS = "claims"
MAX_BYTES = 4096
_FIELDS = {"run_id": str, "controller": int, "token": str, "host": str, "pid": int, "renewed_at": float}


class LeaseHeld(RuntimeError):
    """Another controller drives the run (one line naming it); nothing was changed."""


@dataclass(frozen=True)
class LeaseRecord:
    run_id: str
    controller: int
    token: str
    host: str
    pid: int
    renewed_at: float
    expires_at: float
    released: bool = False

    @property
    def holder(self) -> str:
        return f"controller {self.controller} on {self.host} (pid {self.pid})"


def create_exclusive(fs: Any, path: str, data: bytes) -> None:
    """Write ``data`` at ``path`` only if nothing is there (FileExistsError otherwise), by
    the store's own condition: ``O_EXCL`` on a local folder, fsspec's ``mode="create"``
    elsewhere (S3's If-None-Match, GCS's ifGenerationMatch)."""
    if is_local(fs):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return
    fs.pipe_file(path, data, mode="create")


def margin_of(ttl_s: float) -> float:
    """How long before its expiry a holder stops trusting its lease unread."""
    return min(5.0, ttl_s / 3)


def encode(rec: LeaseRecord, key: bytes) -> bytes:
    return seal(asdict(rec), key)


def decode(data: bytes, key: bytes, run_id: str) -> LeaseRecord | str:
    """The lease, or why it is not one of this run's (one line)."""
    if len(data) > MAX_BYTES:
        return f"is larger than {MAX_BYTES} bytes"
    obj = unseal(data, key, {*_FIELDS, "expires_at", "released"}, "a lease")
    if isinstance(obj, str):
        return obj
    for name, kind in (*_FIELDS.items(), ("expires_at", float), ("released", bool)):
        value = obj.get(name)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            obj[name] = value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return f"has a {name} that is not a {kind.__name__}"
    rec = LeaseRecord(**obj)
    if rec.run_id != run_id:
        return f"is run {rec.run_id[:80]!r}'s"
    return rec


def refusal(current: LeaseRecord | str | None, now: float, token: str = "") -> str | None:
    """Why a controller (``token``) may not take the run now; None when it may: no lease, a
    released or lapsed one, or its own."""
    if current is None:
        return None
    if isinstance(current, str):
        return f"its lease in the control store {current}; remove it if no controller runs this run"
    if current.token == token or current.released or now >= current.expires_at:
        return None
    when = time.strftime("%H:%M:%S UTC", time.gmtime(current.expires_at))
    return (
        f"driven by {current.holder}, whose lease holds until {when} "
        f"({current.expires_at - now:.0f} s): it is renewed while that controller lives"
    )


def next_controller(current: LeaseRecord | str | None, floor: int) -> int:
    """The taker's generation: above the lease's and above any the run's mirror shows."""
    held = current.controller if isinstance(current, LeaseRecord) else 0
    return max(held, floor) + 1


class ControllerLease:
    def __init__(
        self,
        fs: Any,
        root: str,
        key: bytes,
        run_id: str,
        ttl_s: float,
        clock: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.fs, self.path = fs, f"{root.rstrip('/')}/{LEASE_NAME}"
        self.key, self.run_id, self.ttl_s = key, run_id, ttl_s
        self.margin = margin_of(ttl_s)
        self.clock, self.mono, self.sleep = clock, mono, sleep
        self.token = secrets.token_hex(16)
        self.record: LeaseRecord | None = None
        self.confirmed_until = 0.0  # monotonic
        self.previous: LeaseRecord | str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the store --------------------------------------------------------------
    def read(self) -> LeaseRecord | str | None:
        self.fs.invalidate_cache(self.path)
        try:
            data = read_capped(self.fs, self.path, MAX_BYTES)
        except FileNotFoundError:
            return None
        except TooLarge:
            return f"is larger than {MAX_BYTES} bytes"
        return decode(data, self.key, self.run_id)

    def _write(self, rec: LeaseRecord) -> None:
        write_bytes(self.fs, self.path, encode(rec, self.key), durable=True)

    # --- taking -----------------------------------------------------------------
    def take(self, floor: int = 0, settle_s: float | None = None) -> LeaseRecord:
        """The lease, for a new controller; LeaseHeld while another's holds."""
        current = self.read()
        why = refusal(current, self.clock(), self.token)
        if why is not None:
            raise LeaseHeld(why)
        controller = next_controller(current, max(floor, self.claimed()))
        if not self.claim(controller):
            raise LeaseHeld(f"another controller claimed the run as controller {controller} at the same instant")
        start = self.mono()
        now = self.clock()
        rec = LeaseRecord(
            run_id=self.run_id,
            controller=controller,
            token=self.token,
            host=socket.gethostname()[:100],
            pid=os.getpid(),
            renewed_at=now,
            expires_at=now + self.ttl_s,
        )
        self._write(rec)
        self.sleep(min(1.0, self.ttl_s / 10) if settle_s is None else settle_s)
        back = self.read()
        if not isinstance(back, LeaseRecord) or back.token != self.token:
            raise LeaseHeld(refusal(back, self.clock()) or "another controller took the run at the same instant")
        self.previous, self.record = current, rec
        self.confirmed_until = start + self.ttl_s - self.margin
        return rec

    def claimed(self) -> int:
        """The highest controller generation ever claimed for the run (0: none)."""
        folder = f"{self.path.rsplit('/', 1)[0]}/{CLAIMS}"
        self.fs.invalidate_cache(folder)
        try:
            names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(folder, detail=False)]
        except FileNotFoundError:
            return 0
        return max((int(n[1:]) for n in names if n[:1] == "c" and n[1:].isdigit() and len(n) < 12), default=0)

    def claim(self, controller: int) -> bool:
        """Create ``claims/c<controller>`` only if no one has: True when this one did."""
        path = f"{self.path.rsplit('/', 1)[0]}/{CLAIMS}/c{controller}"
        body = json.dumps({"token": self.token, "host": socket.gethostname()[:100], "pid": os.getpid()}).encode()
        try:
            create_exclusive(self.fs, path, body)
        except FileExistsError:
            return False
        except Exception:
            # A store that refused the condition says so its own way (S3: 412 Precondition
            # Failed); one that failed otherwise has no claim there.
            self.fs.invalidate_cache(path)
            if self.fs.exists(path):
                return False
            raise
        return True

    # --- holding ----------------------------------------------------------------
    def renew(self) -> str | None:
        """Read, and extend it when it is still ours: None, or why it is not (lost)."""
        with self._lock:
            assert self.record is not None, "renew() before take()"
            start, now = self.mono(), self.clock()
            current = self.read()
            if not isinstance(current, LeaseRecord) or current.token != self.token:
                why = current if isinstance(current, str) else "gone from the control store"
                if isinstance(current, LeaseRecord):
                    why = f"taken by {current.holder}"
                return why
            self.record = replace(self.record, renewed_at=now, expires_at=now + self.ttl_s)
            self._write(self.record)
            self.confirmed_until = start + self.ttl_s - self.margin
            return None

    def confirmed(self) -> bool:
        return self.record is not None and self.mono() < self.confirmed_until

    def check(self) -> tuple[str, bool] | None:
        """Before an act: None when the lease is ours, else (why, whether the store was
        unreachable for the whole lease: a restart may take it again)."""
        if self.confirmed():
            return None
        deadline = self.mono() + self.ttl_s
        while True:
            try:
                why = self.renew()
            except Exception as exc:  # the store: unreachable, refusing, slow
                if self.mono() >= deadline:
                    return f"the control store did not answer for {self.ttl_s:.0f} s ({type(exc).__name__})", True
                self.sleep(min(1.0, self.ttl_s / 10))
                continue
            return None if why is None else (why, False)

    def start(self, interval_s: float, on_lost: Callable[[str, bool], None]) -> None:
        """Renew in the background every ``interval_s``; ``on_lost`` once it is lost."""

        def loop() -> None:
            while not self._stop.wait(interval_s):
                self._confirm_expired()
                lost = self.check()
                if lost is not None and not self._stop.is_set():
                    on_lost(*lost)
                    return

        self._thread = threading.Thread(target=loop, name="controller-lease", daemon=True)
        self._thread.start()

    def _confirm_expired(self) -> None:
        # The loop renews at its interval, not only once the window closes.
        self.confirmed_until = min(self.confirmed_until, self.mono())

    def release(self) -> None:
        """The run ended or was stopped here: the lease is free at once (if still ours)."""
        self._stop.set()
        with self._lock:
            if self.record is None:
                return
            try:
                current = self.read()
                if isinstance(current, LeaseRecord) and current.token == self.token:
                    now = self.clock()
                    self._write(replace(self.record, renewed_at=now, expires_at=now, released=True))
            except Exception:  # unreachable: the lease lapses by itself
                pass
