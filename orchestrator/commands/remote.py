"""Runs from any machine: ``action=list``, ``action=status`` and ``action=report`` with
``cloud.control_store`` read the runs the store holds mirrors of (a run whose machine is
gone, a teammate's), besides this home's.

Every run with a control store mirrors its journal, config.json, result.json and loss
series to ``<control_store>/<run_id>/state/c<N>/`` (orchestrator/control/mirror.py),
sealed with a key derived from the user's control key. Here each run's newest mirror
that verifies under that key (the key is read as a takeover reads it:
``cloud.control_key``, default ``env:ORCHESTRATOR_CONTROL_KEY``) is copied into a
private temporary folder laid out like a home (``<tmp>/runs/<run_id>/``, 0700, removed
when the command ends), where the code that reads this home's runs reads it unchanged.
Nothing is written to the user's home, and nothing is unpickled: the files are the
verified bytes, read by the same bounded readers as a local run's.

A run whose mirror does not verify (an index not sealed with the run's key, one sealed
with another key, a blob that does not match its index) is a row of its own, UNVERIFIED
with the reason, and nothing of what it holds is shown. A run this home holds too is
this home's: the store's copy of it is not read.

What is read is bounded: the store's folders whose names are run ids (``safe_name``),
the ``limit`` newest of them (by the folder's time where the store gives one, then by
name), for each the MAX_TRIED newest controller generations, and of each mirror only
what the command shows (a list leaves the loss series out; a report plots it).

``store_runs`` is the one entry point for other commands (a console): a context
manager that yields the temporary home and the rows of what could not be shown.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from orchestrator.commands.runs_list import (
    START_ONE,
    UNREADABLE,
    UNVERIFIED_RUN,
    RunRow,
    list_runs,
    newest_first,
    no_runs,
    read_row,
    show,
)
from orchestrator.commands.status import FromStore
from orchestrator.config.checks import MAX_RUN_ID, safe_name
from orchestrator.control.controlstate import run_root
from orchestrator.control.lease import ControllerLease, LeaseRecord
from orchestrator.control.mirror import (
    BLOBS,
    MIRRORED,
    STATE_DIR,
    MirrorError,
    Restored,
    controllers,
    read_blob,
    read_index,
)
from orchestrator.errors import error, printable
from orchestrator.runstate import rundir
from recovery.controlkey import ControlKeyError, parse_source, read_key
from recovery.signing import derive_state_key, secret_from_key

if TYPE_CHECKING:
    from orchestrator.config.schema import Config

# Runs read from the store at most, the newest first: a store of years of runs lists fast.
DEFAULT_LIMIT = 1000
# Controller generations tried per run, newest first, before its mirror is called
# unverified: a run is taken over a few times at most, and folders planted above its
# real mirror cannot make a list read without end.
MAX_TRIED = 16
# Runs read at once: an object store answers each read in tens of milliseconds.
WORKERS = 16
# What a list row and a status read of a mirror: the journal (which holds the run's config
# as it started) and result.json; the loss series, the largest file, and config.json are
# left out. A report reads every mirrored file (it plots the loss).
LISTED = (rundir.JOURNAL_NAME, rundir.RESULT_NAME)
SHOWN = MIRRORED
# A memory filesystem with less room than this is passed over for the temporary home.
MIN_SCRATCH_FREE = 512 * 1024 * 1024
# A row's source, in a list that takes runs from the store too.
LOCAL = "local"
STORE = "store"


class StoreError(RuntimeError):
    """The control store cannot be read, or no control key is given; one line naming the key."""


@dataclass(frozen=True)
class StoreRun:
    """A run whose mirror verified, copied into the temporary home."""

    run_id: str
    controller: int  # the generation whose mirror it is
    written_at: float  # when that mirror's index was written
    where: FromStore
    # Newer generations passed over, each with why (a planted or unfinished mirror).
    skipped: tuple[str, ...] = ()


@dataclass
class StoreRuns:
    """What a control store holds, read: ``home`` (temporary, removed when the context
    ends) holds a run folder for each run in ``runs``; ``unverified`` is a row for each
    run that is not shown (UNVERIFIED: its mirror does not verify; UNREADABLE: the store
    did not give it), and ``left_out`` counts the runs past the limit, not read."""

    store: str
    home: str
    runs: dict[str, StoreRun] = field(default_factory=dict)
    unverified: list[RunRow] = field(default_factory=list)
    left_out: int = 0

    def rows(self, now: float | None = None) -> list[RunRow]:
        """Every run read, as action=list shows it (marked as the store's), newest first."""
        at = time.time() if now is None else now
        runs_dir = rundir.runs_path(self.home)
        rows = [
            replace(read_row(runs_dir, r.run_id, at, r.where), seen_at=r.written_at, source=STORE)
            for r in self.runs.values()
        ]
        return newest_first([*rows, *self.unverified])

    def one(self, run_id: str, home: str) -> StoreRun | str:
        """Run ``run_id``, or why it is not shown (one line): its mirror does not verify,
        the store did not give it, there is none, or its journal has no line yet."""
        run = self.runs.get(run_id)
        if run is not None:
            journal = rundir.journal_path(rundir.run_path(self.home, run_id))
            if os.path.getsize(journal) or os.path.lexists(rundir.result_path(os.path.dirname(journal))):
                return run
            return f"run_id: run {run_id!r} in cloud.control_store {self.store} has no journal line yet"
        row = next((r for r in self.unverified if r.run_id == run_id), None)
        if row is not None:
            return f"run_id: run {run_id!r} in cloud.control_store {self.store} is not shown: {row.reason}"
        return f"run_id: no run named {run_id!r} under {home}, nor in cloud.control_store {self.store}"


# --- the control key --------------------------------------------------------------------------


def no_key_note(spec: str, what: str) -> str:
    """The line that says the store's runs are not ``what`` (listed, shown) for want of a key."""
    source = parse_source(spec)
    return (
        f"note: cloud.control_store: its runs are not {what}, {source} is unset; export {source.ref}=<the key "
        f"their controllers had> to see them too"
    )


def control_key(spec: str, store: str) -> bytes:
    """The user's control key, read as a takeover reads it (recovery/controlkey.py); one
    line naming the key and how to give it when there is none (StoreError), or when its
    source cannot give one (ControlKeyError)."""
    key = read_key(spec)
    if key is None:
        source = parse_source(spec)
        raise StoreError(
            f"cloud.control_key: {source} is unset; the runs in cloud.control_store ({store}) are read with the "
            f"control key their controllers had: export {source.ref}=<that key> (or give cloud.control_key="
            "file:PATH or cmd:COMMAND), or set cloud.control_store=null for this machine's runs only"
        )
    return key


# --- reading the store ------------------------------------------------------------------------


def _open(store: str, options: Mapping[str, Any] | None) -> tuple[Any, str]:
    from recovery.storage import Bounded, op_timeout, open_fs

    opts = dict(options or {})
    try:
        fs, root = open_fs(store, opts)
    except Exception as exc:
        raise StoreError(_unreachable(store, exc)) from None
    # Each call bounded: a store that hangs is one line, not a command that never ends.
    return Bounded(fs, op_timeout(opts)), root.rstrip("/")


def _unreachable(store: str, exc: BaseException) -> str:
    detail = (str(exc).splitlines() or ["-"])[0][:200]
    return (
        f"cloud.control_store: cannot read {store} ({type(exc).__name__}: {detail}); "
        "check the URL, that this machine reaches it, and cloud.control_options"
    )


def run_ids(fs: Any, root: str, limit: int, skip: Collection[str] = ()) -> tuple[list[str], int]:
    """The run ids under the store's ``root`` to read (folders named like a run id, none
    of ``skip``), the ``limit`` newest by the folder's time where the store gives one and
    then by name; and how many more there are. A store with nothing in it yet has none."""
    fs.invalidate_cache(root)
    try:
        entries = fs.ls(root, detail=True)
    except FileNotFoundError:
        return [], 0  # an object store's prefix exists once something is written under it
    found: list[tuple[float, str]] = []
    for entry in entries:
        name = os.path.basename(str(entry.get("name", "")).rstrip("/"))
        if entry.get("type") != "directory" or entry.get("islink"):
            continue
        if not safe_name(name) or len(name) > MAX_RUN_ID or name in skip:
            continue  # _pools and the like are no runs; a name that is no run id is nobody's
        mtime = entry.get("mtime")
        found.append((float(mtime) if isinstance(mtime, int | float) else 0.0, name))
    found.sort(reverse=True)
    return [name for _, name in found[:limit]], max(0, len(found) - limit)


def read_newest(fs: Any, root: str, key: bytes, run_id: str, names: Collection[str]) -> Restored | None:
    """The files ``names`` of the run's newest mirror that verifies (of its MAX_TRIED
    newest generations): its index sealed with the run's state key and naming a journal
    and a config, each blob read matching the index's sha256 and size. None when the run
    has no mirror at all; MirrorError, with each generation's reason, when none verifies.
    As mirror.read_mirror, but for the files asked for alone: a list does not read a long
    run's loss series."""
    gens = controllers(fs, root)
    if not gens:
        return None
    skipped: list[str] = []
    for gen in gens[:MAX_TRIED]:
        base = f"{root}/{STATE_DIR}/c{gen}"
        index = read_index(fs, base, key, run_id, gen)
        if isinstance(index, str):
            skipped.append(f"c{gen}: {index if index.startswith(('no ', 'index.json')) else 'index.json ' + index}")
            continue
        if rundir.JOURNAL_NAME not in index["files"] or rundir.CONFIG_NAME not in index["files"]:
            skipped.append(f"c{gen}: no journal or config")
            continue
        files: dict[str, bytes] = {}
        why = None
        for name, entry in index["files"].items():
            if name not in names:
                continue
            parts = [read_blob(fs, f"{base}/{BLOBS}/{seg['sha256']}", seg) for seg in entry["segments"]]
            bad = next((p for p in parts if isinstance(p, str)), None)
            if bad is not None:
                why = f"c{gen}/{name}: a segment {bad}"
                break
            files[name] = b"".join(p for p in parts if isinstance(p, bytes))
        if why is not None:
            skipped.append(why)
            continue
        return Restored(gen, int(index["seq"]), float(index["written_at"]), files, skipped)
    if len(gens) > MAX_TRIED:
        skipped.append(f"{len(gens) - MAX_TRIED} older generation(s) not tried")
    raise MirrorError("; ".join(skipped)[:600])


def lease_holds(fs: Any, root: str, key: bytes, run_id: str, now: float) -> bool | None:
    """Whether a verified lease of the run's controller holds at ``now`` (its controller
    lives, on whatever machine); None when the lease cannot be read. A lease that does
    not verify is nobody's (orchestrator/control/lease.py)."""
    try:
        current = ControllerLease(fs, root, key, run_id, 1.0).read()
    except Exception:
        return None
    return isinstance(current, LeaseRecord) and not current.released and now < current.expires_at


def scratch_base() -> str | None:
    """Where the temporary home goes: the user's TMPDIR when set; else a memory filesystem
    this user may write (XDG_RUNTIME_DIR, /dev/shm) with room to spare, since the home is
    thousands of small files made and removed within one command, which on a disk take
    longer than reading the store (1 s of 2 for 1000 runs, benchmarks/store_list.py);
    else the system's temporary folder (None)."""
    if os.environ.get("TMPDIR"):
        return None
    for base in (os.environ.get("XDG_RUNTIME_DIR"), "/dev/shm"):
        if not base or not os.path.isdir(base) or not os.access(base, os.W_OK | os.X_OK):
            continue
        try:
            st = os.statvfs(base)
        except OSError:
            continue
        if st.f_bavail * st.f_frsize >= MIN_SCRATCH_FREE:
            return base
    return None


def _write_new(path: str, data: bytes) -> None:
    # A scratch copy, removed when the command ends: no fsync (a crash loses nothing of the run's).
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def go_on_line(store: str, run_id: str) -> str:
    """The command that takes a run no controller drives over, from this machine."""
    return (
        f"take it over with: python -m orchestrator action=resume run_id={run_id} "
        f"cloud.control_store={shlex.quote(store)}"
    )


def _fetch(
    fs: Any,
    root: str,
    store: str,
    options: Mapping[str, Any],
    control_key: bytes,
    run_id: str,
    runs_dir: str,
    names: Collection[str],
    now: float,
) -> StoreRun | RunRow | None:
    """Run ``run_id`` read from the store and copied under ``runs_dir``; a row when it is
    not shown (UNVERIFIED, UNREADABLE); None when the store holds no mirror of it."""
    secret = secret_from_key(control_key, run_id)
    key = derive_state_key(secret, run_id)
    base = run_root(root, run_id)
    try:
        got = read_newest(fs, base, key, run_id, names)
        if got is None:
            return None
        alive = None if rundir.RESULT_NAME in got.files else lease_holds(fs, base, key, run_id, now)
    except MirrorError as exc:
        why = f"not shown: its mirror in the control store does not verify under this control key ({exc})"
        return RunRow(run_id=run_id, status=UNVERIFIED_RUN, reason=why, source=STORE)
    except Exception as exc:  # this run's reads failed (the store answered the listing)
        why = f"cannot be read from the control store ({type(exc).__name__}: {str(exc)[:200]})"
        return RunRow(run_id=run_id, status=UNREADABLE, reason=why, source=STORE)
    run_dir = os.path.join(runs_dir, run_id)
    try:
        os.mkdir(run_dir, 0o700)
        for name, data in got.files.items():
            _write_new(os.path.join(run_dir, name), data)
    except OSError as exc:  # the temporary folder full: this run's row says so, the rest are listed
        shutil.rmtree(run_dir, ignore_errors=True)
        why = f"cannot be copied to {os.path.dirname(runs_dir)} ({exc.strerror or type(exc).__name__}); set TMPDIR"
        return RunRow(run_id=run_id, status=UNREADABLE, reason=why, source=STORE)
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(got.written_at))
    where = FromStore(
        store=store,
        options=dict(options),
        secret=secret,
        alive=alive,
        go_on=go_on_line(store, run_id),
        source=f"cloud.control_store {store} (the mirror of controller {got.controller}, written {when})",
    )
    return StoreRun(run_id, got.controller, got.written_at, where, tuple(got.skipped))


@contextmanager
def store_runs(
    store: str,
    options: Mapping[str, Any] | None,
    control_key: bytes,
    limit: int = DEFAULT_LIMIT,
    *,
    skip: Collection[str] = (),
    only: str | None = None,
    files: Collection[str] = LISTED,
) -> Iterator[StoreRuns]:
    """The runs of the control store ``store`` (``limit`` newest; none of ``skip``, the
    runs this home holds), each one's newest verified mirror copied into a temporary
    home that is removed on the way out. ``only``: that run alone (status, report);
    ``files``: the mirrored files copied (LISTED: what a list row and status read;
    SHOWN: all of them, for a report's plot). StoreError (one line naming
    cloud.control_store) when the store cannot be listed."""
    fs, root = _open(store, options)
    if only is not None:
        ids, left_out = ([only] if safe_name(only) and len(only) <= MAX_RUN_ID else []), 0
    else:
        try:
            ids, left_out = run_ids(fs, root, limit, skip)
        except Exception as exc:
            raise StoreError(_unreachable(store, exc)) from None
    names = tuple(files)
    home = tempfile.mkdtemp(prefix="orchestrator-store-", dir=scratch_base())  # 0700, this user's alone
    try:
        runs_dir = rundir.runs_path(home)
        os.mkdir(runs_dir, 0o700)
        now = time.time()
        opts = dict(options or {})

        def fetch(run_id: str) -> StoreRun | RunRow | None:
            return _fetch(fs, root, store, opts, control_key, run_id, runs_dir, names, now)

        with ThreadPoolExecutor(max_workers=max(1, min(WORKERS, len(ids)))) as pool:
            got = list(pool.map(fetch, ids))
        found = StoreRuns(store=store, home=home, left_out=left_out)
        for item in got:
            if isinstance(item, StoreRun):
                found.runs[item.run_id] = item
            elif isinstance(item, RunRow):
                found.unverified.append(item)
        yield found
    finally:
        shutil.rmtree(home, ignore_errors=True)


# --- the commands -----------------------------------------------------------------------------


def main(cfg: Config) -> int:
    """action=list, status or report with cloud.control_store set."""
    try:
        if str(cfg.action) == "list":
            return list_main(cfg)
        if str(cfg.action) == "status":
            return status_main(cfg)
        return report_main(cfg)
    except (StoreError, ControlKeyError) as exc:
        return error(str(exc))


def list_main(cfg: Config) -> int:
    """This home's runs and the store's (those this home does not hold), newest first,
    each row saying where it was read."""
    store, home = str(cfg.cloud.control_store), cfg.home_path
    local = [replace(r, source=LOCAL) for r in list_runs(home)]
    key = read_key(cfg.cloud.control_key)
    if key is None:
        # No key on this machine (a cloud config names a store by default): its own runs,
        # and one line on how to see the store's.
        print(no_key_note(cfg.cloud.control_key, "listed"), file=sys.stderr)
        return show(newest_first(local), str(cfg.format), no_runs(home))
    with store_runs(store, cfg.cloud.control_options, key, skip={r.run_id for r in local}) as found:
        rows = newest_first([*local, *found.rows()])
    if found.left_out:
        print(
            f"note: cloud.control_store: {found.left_out} older run(s) in {printable(store)} not read "
            f"(the {DEFAULT_LIMIT} newest are listed)",
            file=sys.stderr,
        )
    empty = f"no runs under {printable(home)}, nor in {printable(store)}; start one with: {START_ONE}"
    return show(rows, str(cfg.format), empty)


def _local(cfg: Config) -> bool:
    return os.path.lexists(rundir.run_path(cfg.home_path, str(cfg.run_id)))


def status_main(cfg: Config) -> int:
    """The run's status from this home, or, when this home does not hold it, from the store."""
    from orchestrator.commands import status

    home, run_id = cfg.home_path, str(cfg.run_id)
    if _local(cfg):
        return status.main(home, run_id)
    store = str(cfg.cloud.control_store)
    key = control_key(cfg.cloud.control_key, store)
    with store_runs(store, cfg.cloud.control_options, key, only=run_id) as found:
        run = found.one(run_id, home)
        if isinstance(run, str):
            return error(run)
        return status.main(found.home, run_id, run.where)


def report_main(cfg: Config) -> int:
    """The run's report from this home, or from the store: its text and plot then go to a
    new private folder of their own (the run's folder here is gone when the command ends,
    and nothing is written to the home)."""
    from orchestrator.commands import report

    home, run_id = cfg.home_path, str(cfg.run_id)
    if _local(cfg):
        return report.main(home, run_id, cfg.junit)
    store = str(cfg.cloud.control_store)
    key = control_key(cfg.cloud.control_key, store)
    with store_runs(store, cfg.cloud.control_options, key, only=run_id, files=SHOWN) as found:
        run = found.one(run_id, home)
        if isinstance(run, str):
            return error(run)
        out = tempfile.mkdtemp(prefix=f"orchestrator-report-{run_id}-")
        print(f"source: {printable(run.where.source)}")
        code = report.main(found.home, run_id, cfg.junit, out_dir=out)
        if code != 0:
            shutil.rmtree(out, ignore_errors=True)
        return code
