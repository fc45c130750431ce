"""A shared standby pool (``recovery.standby_pool``): one warm cluster per region for
every run that names the pool, held through the control store (recovery/pool.py has
the records and the decisions).

``<control_store>/_pools/<pool>/<region>/log/e<seq>``: the region's entries, each created
only if absent and sealed with the pool's key; ``members/<run_id>.json``: each run's
membership, renewed while it waits. A run whose failover would go to a region joins the
pool there, launching its standby when the pool has none; the first run to lose its
region takes it (a cluster, up, with nothing of any run's on it), and the runs still
waiting launch the next. The last run to leave a standby tears it down. Each run
journals its share of each standby's idle time (``pool_share``), which its goodput costs.

A pool standby is a cluster, not a runtime waiting for one run (as ``recovery.standby``'s
is): the run that takes it skips provisioning, not its runtime's start-up.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from orchestrator.config.schema import Config
from orchestrator.control.cleanup import tear_down
from orchestrator.control.context import RunContext
from orchestrator.control.lease import create_exclusive
from orchestrator.control.standby import Warm
from orchestrator.runstate.events import PoolJoined, PoolLaunched, PoolShare, PoolTaken
from providers.base import Capability, ClusterHandle, Provider, ProvisionError
from recovery.boundedjson import CodecError, decode
from recovery.detection import Health, Observation
from recovery.fsio import TooLarge, UnsafeFile, read_capped, write_bytes
from recovery.policy import History, next_region
from recovery.pool import (
    GONE,
    LAUNCHING,
    READY,
    TAKEN,
    Entry,
    Member,
    entry_of,
    member_of,
    others_waiting,
    share_s,
    standing,
    wants_launch,
)
from recovery.sealed import opened, seal
from recovery.storage import open_fs

MAX_BYTES = 16_384
# Entries read back from the newest: a standby's life is three or four.
MAX_READ = 16
# Members read per region: more runs than that sharing one standby is no pool.
MAX_MEMBERS = 256
# How often a waiting run renews its membership and looks at the pool.
CHECK_EVERY_S = 2.0
_ENTRY_NAME = re.compile(r"e([0-9]{1,9})")
_MEMBER_NAME = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]{0,99})\.json")

Invalid = Callable[[str, str], None]  # (path, why)


def pool_refusal(cfg: Config, provider: Provider, control_key: bytes | None) -> str | None:
    """Why the run cannot join its standby pool here (one line), or None."""
    pool = cfg.recovery.standby_pool
    if pool is None:
        return None
    if Capability.SHARED_CLUSTERS not in provider.capabilities:
        return (
            f"recovery.standby_pool: provider {provider.name!r} cannot hand a cluster from one run to another "
            "(its clusters' tokens are each run's own); drop recovery.standby_pool, or use recovery.standby=true"
        )
    if control_key is None:
        return (
            f"recovery.standby_pool: the pool's records are sealed with the control key, and "
            f"{cfg.cloud.control_key} gives none; set it (the same for every run of pool {pool!r}), "
            "e.g. export ORCHESTRATOR_CONTROL_KEY=$(openssl rand -hex 32)"
        )
    return None


class PoolStore:
    """One pool's records in the control store, sealed with the pool's key: what does not
    open is nobody's (reported once, then passed over)."""

    def __init__(
        self,
        url: str,
        options: dict[str, Any] | None,
        pool: str,
        key: bytes,
        run_id: str,
        on_invalid: Invalid = lambda path, why: None,
    ) -> None:
        self.fs, root = open_fs(url.rstrip("/"), options)
        self.root = f"{root.rstrip('/')}/_pools/{pool}"
        self.pool, self.key, self.run_id = pool, key, run_id
        self.on_invalid = on_invalid
        self._reported: set[tuple[str, str]] = set()

    def _read(self, path: str) -> dict[str, Any] | str | None:
        try:
            data = read_capped(self.fs, path, MAX_BYTES)
        except FileNotFoundError:
            return None
        except (TooLarge, UnsafeFile, IsADirectoryError, NotADirectoryError):
            return f"is not a file of at most {MAX_BYTES} bytes"
        try:
            obj = decode(data, strict=False)
        except CodecError:
            return "is not JSON"
        if not isinstance(obj, dict):
            return "is not a JSON object"
        return opened(obj, self.key)

    def _invalid(self, path: str, why: str) -> None:
        if (path, why) not in self._reported and len(self._reported) < 100:
            self._reported.add((path, why))
            self.on_invalid(path[len(self.root) :].lstrip("/"), f"{why}: passed over (not sealed with the pool's key)")

    def _names(self, folder: str) -> list[str]:
        self.fs.invalidate_cache(folder)
        try:
            return [str(p).rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(folder, detail=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def entries(self, region: str) -> tuple[list[Entry], int]:
        """The region's newest entries that verify, oldest first, and the highest sequence
        number taken (by a verified entry or not: the next is written above it)."""
        folder = f"{self.root}/{region}/log"
        seqs = sorted(int(m.group(1)) for n in self._names(folder) if (m := _ENTRY_NAME.fullmatch(n)))
        out: list[Entry] = []
        for seq in seqs[-MAX_READ:]:
            path = f"{folder}/e{seq}"
            got = self._read(path)
            entry = got if not isinstance(got, dict) else entry_of(got, seq)
            if isinstance(entry, Entry):
                out.append(entry)
            elif entry is not None:
                self._invalid(path, entry)
        return out, (seqs[-1] if seqs else 0)

    def append(self, region: str, after: int, entry: Entry) -> Entry | None:
        """``entry`` as number ``after + 1``, only if no one wrote it first."""
        entry = replace(entry, seq=after + 1)
        try:
            create_exclusive(self.fs, f"{self.root}/{region}/log/e{entry.seq}", seal(entry.body(), self.key))
        except FileExistsError:
            return None
        return entry

    def members(self, region: str) -> list[Member]:
        folder = f"{self.root}/{region}/members"
        out: list[Member] = []
        for name in sorted(self._names(folder))[:MAX_MEMBERS]:
            m = _MEMBER_NAME.fullmatch(name)
            if m is None:
                continue
            path = f"{folder}/{name}"
            got = self._read(path)
            member = got if not isinstance(got, dict) else member_of(got, m.group(1))
            if isinstance(member, Member):
                out.append(member)
            elif member is not None:
                self._invalid(path, member)
        return out

    def mine(self, region: str) -> Member | None:
        return next((m for m in self.members(region) if m.run_id == self.run_id), None)

    def put_member(self, region: str, member: Member) -> None:
        write_bytes(self.fs, f"{self.root}/{region}/members/{self.run_id}.json", seal(member.body(), self.key))


class PooledStandby:
    """The run's side of a standby pool: as ``StandbyManager`` to the attempt runner and
    the controller (ensure, take, check, close)."""

    def __init__(
        self,
        ctx: RunContext,
        store: PoolStore,
        alloc_generation: Callable[[], int],
        history: Callable[[], History] = History,
    ) -> None:
        self.ctx, self.store = ctx, store
        self.enabled = True
        self.alloc_generation = alloc_generation
        self.history = history
        self.launch: Callable[..., ClusterHandle] | None = None
        self.start_runtime: Callable[..., Any] | None = None
        self._lock = threading.Lock()
        self._target: str | None = None
        self._launcher: threading.Thread | None = None
        self._closed = False
        self._next_check = 0.0
        # Per standby (its cluster's name): until when this run's share is journaled.
        self._paid_to: dict[str, float] = {}
        # This run's membership in each region it waited in, as last written.
        self._members: dict[str, Member] = {}
        self.ttl_s = max(30.0, 3 * CHECK_EVERY_S, float(ctx.cfg.recovery.controller_lease_s))
        self.host = socket.gethostname()[:200]
        # A cluster of processes on the machine that launched it is no other machine's to
        # watch, take or end (a pid or port here would be another process's).
        self.local_only = Capability.LOCAL_PROCESSES in ctx.provider.capabilities

    # --- membership ------------------------------------------------------------------------
    def ensure(self, current: str) -> None:
        """Wait on the pool's standby in the region a failover from ``current`` would pick."""
        if self._closed:
            return
        now = self.ctx.clock()
        target = next_region(
            self.ctx.candidates,
            current,
            {**self.history().region_failed_at, current: now},
            now,
            self.ctx.cfg.recovery.region_cooldown_s,
        )
        if target == self._target:
            return
        self._leave()
        if target is None:
            return
        self._target = target
        self._renew(target, now)
        self.ctx.emit(PoolJoined(pool=self.store.pool, region=target))
        self._look(target, now)

    def _mine(self, region: str, now: float) -> Member:
        # This run alone writes its membership: read from the store once (an earlier
        # controller's, on a resume), then kept here.
        if region not in self._members:
            self._members[region] = self.store.mine(region) or Member(self.store.run_id, (), now)
        return self._members[region]

    def _put_mine(self, region: str, member: Member) -> None:
        self._members[region] = member
        self.store.put_member(region, member)

    def _renew(self, region: str, now: float) -> None:
        self._put_mine(region, self._mine(region, now).joined(now, now + self.ttl_s))

    def _leave(self) -> None:
        region, self._target = self._target, None
        if region is None:
            return
        now = self.ctx.clock()
        self._put_mine(region, self._mine(region, now).left(now))
        entries, top = self.store.entries(region)
        current = entries[-1] if entries else None
        if current is None or current.state != READY:
            return
        members = self.store.members(region)
        self._pay(region, current, now, members)
        if self._ours(current) and not others_waiting(self.store.run_id, members, now):
            # No run waits on it any more: it goes, by whoever says so first.
            if self.store.append(region, top, Entry(0, GONE, self.store.run_id, now, cluster=current.cluster)):
                self._tear_down(current, "the last run its pool standby covered left")

    # --- the watch's tick ------------------------------------------------------------------
    def check(self) -> None:
        """Renew the membership, refill a pool whose standby was taken or lost, drop one
        that died, and journal this run's share of a standby that ended."""
        region = self._target
        now = self.ctx.clock()
        if region is None or self._closed or now < self._next_check:
            return
        self._next_check = now + CHECK_EVERY_S
        self._renew(region, now)
        self._look(region, now)

    def _look(self, region: str, now: float) -> None:
        entries, top = self.store.entries(region)
        current = entries[-1] if entries else None
        if current is not None and current.state in (TAKEN, GONE):
            ended = standing(entries)
            if ended is not None and ended.cluster is not None:
                self._pay(region, ended, current.at)
        if current is not None and current.state == READY and self._ours(current) and not self._healthy(current):
            gone = self.store.append(region, top, Entry(0, GONE, self.store.run_id, now, cluster=current.cluster))
            if gone is None:
                return  # another run said so first: it tears it down
            self._pay(region, current, now)
            self._tear_down(current, "the pool standby was lost")
            current, top = gone, gone.seq
        if wants_launch(current, now):
            self._launch_in_background(region, top)

    def _launch_in_background(self, region: str, top: int) -> None:
        with self._lock:
            if self._closed or (self._launcher is not None and self._launcher.is_alive()):
                return
            self._launcher = threading.Thread(target=self._launch, args=(region, top), name="pool", daemon=True)
            self._launcher.start()

    def _launch(self, region: str, top: int) -> None:
        assert self.launch is not None
        ctx, now = self.ctx, self.ctx.clock()
        deadline = now + ctx.cfg.recovery.provision_timeout_s * 2 + 60
        claim = Entry(0, LAUNCHING, self.store.run_id, now, expires_at=deadline, launched_at=now)
        claimed = self.store.append(region, top, claim)
        if claimed is None:
            return  # another run launches it
        gen = self.alloc_generation()
        try:
            cluster = self.launch(region, gen, purpose="pool")
        except ProvisionError as exc:
            self.store.append(region, claimed.seq, Entry(0, GONE, self.store.run_id, ctx.clock()))
            ctx.emit(PoolLaunched(pool=self.store.pool, region=region, error=str(exc)[:500]))
            return
        ready = Entry(
            0, READY, self.store.run_id, ctx.clock(), cluster=asdict(cluster), launched_at=now, host=self.host
        )
        if self.store.append(region, claimed.seq, ready) is None:
            # Past its deadline, another run launched in its place: this one is no one's.
            tear_down(ctx.provider, ctx.emit, cluster, reason="another run launched the pool standby", purpose="pool")
            return
        ctx.emit(
            PoolLaunched(
                pool=self.store.pool, region=region, cluster=cluster.name, provision_s=round(ctx.clock() - now, 3)
            )
        )

    # --- a failover --------------------------------------------------------------------------
    def take(self, region: str) -> Warm | None:
        """The pool's standby in ``region``, if it has one up: the caller's from now."""
        ctx = self.ctx
        deadline = time.monotonic() + ctx.cfg.recovery.provision_timeout_s
        while True:
            entries, top = self.store.entries(region)
            current = entries[-1] if entries else None
            now = ctx.clock()
            launching = current is not None and current.state == LAUNCHING and not wants_launch(current, now)
            if not launching or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # still coming up: waiting for it beats starting from nothing
        if current is None or current.state != READY or current.cluster is None:
            return None
        cluster = _handle(current.cluster)
        if cluster.region != region or cluster.provider != ctx.provider.name or not self._ours(current):
            return None
        if not self._healthy(current):
            if self.store.append(region, top, Entry(0, GONE, self.store.run_id, now, cluster=current.cluster)):
                self._pay(region, current, now)
                self._tear_down(current, "the pool standby was lost")
            ctx.emit(PoolTaken(pool=self.store.pool, region=region, cluster=cluster.name, taken=False, reason="lost"))
            return None
        if self.store.append(region, top, Entry(0, TAKEN, self.store.run_id, now, cluster=current.cluster)) is None:
            reason = "another run took it first"
            ctx.emit(PoolTaken(pool=self.store.pool, region=region, cluster=cluster.name, taken=False, reason=reason))
            return None
        self._pay(region, current, now)
        if self._target == region:
            self._put_mine(region, self._mine(region, now).left(now))
            self._target = None
        gen = self.alloc_generation()
        ctx.emit(PoolTaken(pool=self.store.pool, region=region, cluster=cluster.name, generation=gen))
        return Warm(region, gen, cluster, None, pool=self.store.pool)

    def observe(self, obs: Observation, noticed: bool) -> None:
        """A pool's standby stands for every run of the pool, whatever one run's looks say."""

    # --- the end -------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._closed = True
            launcher = self._launcher
        if launcher is not None:
            launcher.join(timeout=self.ctx.cfg.recovery.provision_timeout_s + 30)
        self._leave()

    # --- helpers -------------------------------------------------------------------------------
    def _ours(self, entry: Entry) -> bool:
        """Can this machine reach ``entry``'s cluster?"""
        return not self.local_only or entry.host == self.host

    def _healthy(self, entry: Entry) -> bool:
        assert entry.cluster is not None
        try:
            return self.ctx.provider.health(_handle(entry.cluster)).health is not Health.GONE
        except Exception:
            return True  # cannot tell: not dropped for a glitch

    def _pay(self, region: str, ready: Entry, end: float, members: list[Member] | None = None) -> None:
        """Journal this run's share of ``ready``'s standby up to ``end`` (once per second of
        it); ``members``: the region's, when the caller has just read them."""
        assert ready.cluster is not None
        name = str(ready.cluster["name"])
        start = max(ready.launched_at or ready.at, self._paid_to.get(name, 0.0))
        if end <= start:
            return
        if members is None:
            members = self.store.members(region)
        share = share_s(self.store.run_id, members, start, end)
        self._paid_to[name] = end
        if share <= 0:
            return
        runs = sum(1 for m in members if any(min(b, end) > max(a, start) for a, b in m.spans()))
        self.ctx.emit(
            PoolShare(
                pool=self.store.pool,
                region=region,
                share_s=round(share, 3),
                cluster=name,
                from_ts=round(start, 3),
                to_ts=round(end, 3),
                runs=runs,
            )
        )

    def _tear_down(self, entry: Entry, why: str) -> None:
        assert entry.cluster is not None
        tear_down(self.ctx.provider, self.ctx.emit, _handle(entry.cluster), reason=why, purpose="pool")


def _handle(cluster: dict[str, Any]) -> ClusterHandle:
    return ClusterHandle(
        name=str(cluster["name"]),
        region=str(cluster["region"]),
        provider=str(cluster["provider"]),
        address=str(cluster["address"]),
        info=dict(cluster.get("info") or {}),
    )
