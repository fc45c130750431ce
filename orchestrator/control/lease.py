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

Whoever can write the control store without the run's key can delete or replace these
files, never forge them, so what does not verify is nobody's: a lease that is gone, not
a lease, unsigned, or signed for an earlier controller (a copy put back) neither makes
the holder stand down (it writes its own again, journaled once per reason) nor keeps a
taker out; only a verified lease of a later controller does. Claims are sealed the same
way: one that does not verify neither raises the next number nor blocks it (the taker
claims the next free one). Generations are bounded (``MAX_CONTROLLER``), by the claims'
reader, the lease's and the mirror's alike (``GENERATION_NAME``).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from recovery.fsio import TooLarge, UnsafeFile, is_local, read_capped, write_bytes
from recovery.sealed import seal, unseal

LEASE_NAME = "lease.json"
CLAIMS = "claims"
MAX_BYTES = 4096
# Controller generations a run can have: far above any run's takeovers, and short names.
MAX_CONTROLLER = 999_999
# ``c<N>``: a claim's name and a mirror's folder, for N in 1..MAX_CONTROLLER.
GENERATION_NAME = re.compile(r"c([1-9][0-9]{0,5})")
# Claims read, newest first, before the highest that verifies is taken as the floor; and
# claims passed over, one after another, before a taker gives up.
MAX_CLAIMS_READ = 64
_FIELDS = {"run_id": str, "controller": int, "token": str, "host": str, "pid": int, "renewed_at": float}
_CLAIM_FIELDS = {"run_id", "controller", "token", "host", "pid"}
# What a store says when a path is not a file it can read: never a lease or a claim.
_NOT_A_FILE = (UnsafeFile, IsADirectoryError, NotADirectoryError)


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
    if not 1 <= rec.controller <= MAX_CONTROLLER:
        return f"names controller {rec.controller}, outside 1..{MAX_CONTROLLER}"
    return rec


def claim_bytes(key: bytes, run_id: str, controller: int, token: str) -> bytes:
    body = {"run_id": run_id, "controller": controller, "token": token, "host": socket.gethostname()[:100]}
    return seal({**body, "pid": os.getpid()}, key)


def claim_problem(data: bytes, key: bytes, run_id: str, controller: int) -> str | None:
    """None when ``data`` is this run's claim of ``controller``, else why not (one line)."""
    obj = unseal(data, key, _CLAIM_FIELDS, "a claim")
    if isinstance(obj, str):
        return obj
    if obj["run_id"] != run_id or obj["controller"] != controller:
        return "names another run or controller"
    return None


def generation_of(name: str) -> int | None:
    """N for a name ``c<N>`` within the bound, else None."""
    m = GENERATION_NAME.fullmatch(name)
    return int(m.group(1)) if m else None


def refusal(current: LeaseRecord | str | None, now: float, token: str = "", running: bool | None = None) -> str | None:
    """Why a controller (``token``) may not take the run now; None when it may: no lease, a
    released or lapsed one, or its own. ``running``: whether the holder's pid still runs,
    where this machine can tell (``holder_running``)."""
    if current is None or isinstance(current, str):
        return None  # a lease that does not verify is nobody's
    if current.token == token or current.released or now >= current.expires_at:
        return None
    when = time.strftime("%H:%M:%S UTC", time.gmtime(current.expires_at))
    if running is False:
        return (
            f"driven by {current.holder}, which no longer runs on this machine; its lease lapses at {when} "
            f"({current.expires_at - now:.0f} s from now): resume then"
        )
    return (
        f"driven by {current.holder}, whose lease holds until {when} "
        f"({current.expires_at - now:.0f} s): it is renewed while that controller lives"
    )


def holder_running(current: LeaseRecord | str | None) -> bool | None:
    """Whether the lease's holder still runs, where that can be told: its pid on this machine
    (the same host name); None for another machine's, or no lease."""
    if not isinstance(current, LeaseRecord) or current.host != socket.gethostname()[:100]:
        return None
    import psutil

    return psutil.pid_exists(current.pid)


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
        # Told why what stood in place of the lease was nobody's (the holder writes its own again).
        self.on_ignored: Callable[[str], None] = lambda reason: None
        # Claims that are not this run's, met while taking: (name, why), for the journal.
        self.ignored_claims: list[tuple[str, str]] = []
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
        except _NOT_A_FILE as exc:
            return f"is not a file ({_what(exc)})"
        return decode(data, self.key, self.run_id)

    def _write(self, rec: LeaseRecord) -> None:
        _clear_folder(self.fs, self.path)
        write_bytes(self.fs, self.path, encode(rec, self.key), durable=True)

    # --- taking -----------------------------------------------------------------
    def take(self, floor: int = 0, settle_s: float | None = None) -> LeaseRecord:
        """The lease, for a new controller; LeaseHeld while another's holds."""
        current = self.read()
        why = refusal(current, self.clock(), self.token, holder_running(current))
        if why is not None:
            raise LeaseHeld(why)
        controller = next_controller(current, max(floor, self.claimed()))
        for _ in range(MAX_CLAIMS_READ):
            if controller > MAX_CONTROLLER:
                break
            if self.claim(controller):
                break
            why = self._claim_problem(controller)
            if why is None:
                raise LeaseHeld(f"another controller claimed the run as controller {controller} at the same instant")
            self.ignored_claims.append((f"c{controller}", why))
            controller += 1  # a claim that is not this run's holds its number, not the run
        else:
            controller = MAX_CONTROLLER + 1
        if controller > MAX_CONTROLLER:
            raise LeaseHeld(
                f"no controller number is free to claim: {self._claims_folder()} holds claims that are not this "
                "run's; remove them (no controller of the run writes them)"
            )
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
        if isinstance(back, LeaseRecord) and back.token != self.token:
            # Only another taker's verified lease tells of a race; what does not verify is nobody's.
            raise LeaseHeld(refusal(back, self.clock()) or "another controller took the run at the same instant")
        self.previous, self.record = current, rec
        self.confirmed_until = start + self.ttl_s - self.margin
        return rec

    def _claims_folder(self) -> str:
        return f"{self.path.rsplit('/', 1)[0]}/{CLAIMS}"

    def claimed(self) -> int:
        """The highest controller generation a claim of this run's names (0: none). Claims
        that do not verify (kept in ``ignored_claims``) and names past the bound count for
        nothing; the newest MAX_CLAIMS_READ names are read."""
        folder = self._claims_folder()
        self.fs.invalidate_cache(folder)
        try:
            names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(folder, detail=False)]
        except (FileNotFoundError, *_NOT_A_FILE):
            return 0
        gens = sorted({g for n in names if (g := generation_of(n)) is not None}, reverse=True)
        for gen in gens[:MAX_CLAIMS_READ]:
            why = self._claim_problem(gen)
            if why is None:
                return gen
            self.ignored_claims.append((f"c{gen}", why))
        return 0

    def _claim_problem(self, controller: int) -> str | None:
        path = f"{self._claims_folder()}/c{controller}"
        self.fs.invalidate_cache(path)
        try:
            data = read_capped(self.fs, path, MAX_BYTES)
        except FileNotFoundError:
            return "is gone"
        except TooLarge:
            return f"is larger than {MAX_BYTES} bytes"
        except _NOT_A_FILE as exc:
            return f"is not a file ({_what(exc)})"
        return claim_problem(data, self.key, self.run_id, controller)

    def claim(self, controller: int) -> bool:
        """Create ``claims/c<controller>`` only if no one has: True when this one did."""
        folder = self._claims_folder()
        path = f"{folder}/c{controller}"
        body = claim_bytes(self.key, self.run_id, controller, self.token)
        if _not_a_folder(self.fs, folder):
            # No controller writes a file named so: whatever stands where the folder goes is removed.
            self.fs.rm_file(folder)
            self.ignored_claims.append((CLAIMS, "a file where the claims' folder goes: removed"))
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
        """Read, and extend it when it is still ours: None, or why it is not (lost): only a
        verified lease of a later controller takes it. Anything else in its place is
        nobody's (``on_ignored``), and the holder's own is written again."""
        with self._lock:
            assert self.record is not None, "renew() before take()"
            start, now = self.mono(), self.clock()
            current = self.read()
            if isinstance(current, LeaseRecord) and current.token != self.token:
                if current.controller > self.record.controller:
                    return f"taken by {current.holder}"
                self.on_ignored(f"a lease of controller {current.controller}, not a later one, was put back")
            elif current is None or isinstance(current, str):
                self.on_ignored("gone from the control store" if current is None else f"lease.json {current}")
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


def _what(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _not_a_folder(fs: Any, path: str) -> bool:
    """Whether something other than a folder stands at ``path`` in a local store (an object
    store has no such thing: a key and a prefix of the same name live side by side)."""
    if not is_local(fs):
        return False
    local = fs._strip_protocol(path)
    return os.path.lexists(local) and (os.path.islink(local) or not os.path.isdir(local))


def _clear_folder(fs: Any, path: str) -> None:
    """A folder (or a link) where a file of ours goes in a local store is not ours: removed,
    since the write would fail on it for good."""
    if not is_local(fs):
        return
    local = fs._strip_protocol(path)
    if os.path.islink(local):
        os.unlink(local)
    elif os.path.isdir(local):
        shutil.rmtree(local)
