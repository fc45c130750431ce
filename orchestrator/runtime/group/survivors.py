"""Survivors keep their processes: leave the broken group, re-form it, restore from peers.

When Ray Train replaces a lost worker and leaves the others running (see
orchestrator/runtime/group/rendezvous.py), each survivor meets the loss as a failed collective.
It waits for what it handed its uploader to be committed, leaves the broken group,
waits for the driver's next epoch and joins it with the replacement. Then every rank
restores the newest committed checkpoint: the bytes a rank holds in memory for it
(``peer_state.HeldSnapshots``) are used where they match the signed manifest, a rank
that lacks a file gets it from a rank that holds it, and only what no rank holds (or
what fails the check) is read from the store. The model, optimizer and data loader of a
survivor are the ones it had; its RNG states and position roll back to the checkpoint's.

A mixin of the training loop (train_loop._Loop), which gives it the parts, the stores
and the load.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

from orchestrator.runtime.group.peer_state import exchange
from orchestrator.runtime.group.rendezvous import Refused
from orchestrator.runtime.loop.worker import causes, is_comm_failure, restore_rule
from recovery.fencing import FencedError
from recovery.manifest import Manifest
from recovery.membership import plan_transfers
from recovery.store import sha256_hex


def release_frames(exc: BaseException) -> None:
    """Drop the locals of every frame ``exc`` (and what it wraps) went through: nothing
    of the failed step (the DDP wrapper, and through it the broken group) stays alive."""
    for e in causes(exc):
        if e.__traceback__ is not None:
            traceback.clear_frames(e.__traceback__)


class Survivors:
    # Given by the training loop and WorkerAttempt.
    spec: Any
    rank: int
    world: int
    gen: int
    control: Any
    member: Any
    held: Any
    store: Any
    fallbacks: list[Any]
    checkpointer: Any
    _restored_url: str | None

    def survivable(self, exc: BaseException) -> bool:
        """Whether this rank outlives ``exc``: a collective broken by a lost peer, while
        the group can form again around the survivors."""
        return self.member is not None and is_comm_failure(exc)

    def regroup(self, exc: BaseException) -> int:
        """Out of the broken group and into the next epoch's; the step restored there."""
        step = getattr(self, "user_step", 0)
        left = self.member.epoch
        try:
            # What this rank handed over is committed (or failed) before the choice is made.
            if self.rank == 0:
                self.checkpointer.wait()
            self.wait_for_share()  # type: ignore[attr-defined]
        except Exception:
            pass  # the newest committed checkpoint is whatever the stores hold
        self.member.leave()
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]
        self.control.event(self.gen, "group_left", rank=self.rank, pid=os.getpid(), step=step, epoch=left, error=error)
        last = left
        while True:
            try:
                epoch = self.member.wait_for_epoch(last)
            except TimeoutError:
                raise exc from None  # no replacement came: Ray Train restarts the group
            try:
                members = self.member.join(epoch)
                break
            except Refused as refused:
                self.control.event(
                    self.gen, "regroup_refused", rank=self.rank, pid=os.getpid(), epoch=epoch, reason=str(refused)[:500]
                )
                raise FencedError(f"refused by the group of epoch {epoch}: {refused}") from None
            except Exception:
                # A member never came (lost while the group formed): its replacement's epoch follows.
                self.member.leave()
                last = epoch
        self.world = len(members.pids)
        return self.begin(first=False)  # type: ignore[attr-defined]

    # --- the restore from peers ----------------------------------------------------------
    def newest_committed(self) -> tuple[int, str] | None:
        """Rank 0: the newest checkpoint committed on the lineage, by its signed manifest
        alone (its files are checked as they are loaded, wherever they come from)."""
        stores = [self.store, *self.fallbacks]
        lineage, usable = restore_rule(self.spec, self.control, stores)
        best: tuple[int, Manifest] | None = None
        for i, store in enumerate(stores):
            if store not in usable:
                continue
            try:
                steps = store.candidates(self.spec.run_id)
            except Exception:  # an unreachable store tells nothing: the others still count
                continue
            for step in steps:
                if best is not None and step <= best[1].step:
                    break
                m, verdict = store.trusted_manifest(self.spec.run_id, step)
                if m is not None and verdict.ok and lineage.allows(m.attempt, m.step):
                    best = (i, m)
                    break
                why = verdict.reason if not verdict.ok or m is None else lineage.why_not(m.attempt, m.step)
                self.control.event(self.gen, "checkpoint_skipped", step=step, reason=why, region=store.region)
        return None if best is None else (best[0], best[1].to_json())

    def peer_restore(self) -> int:
        """(All ranks of a group formed around survivors.) The newest committed checkpoint,
        each file from this rank's memory, a peer's, or the store; the step restored."""
        import torch.distributed as dist

        choice: list[Any] = [self.newest_committed() if self.rank == 0 else None]
        dist.broadcast_object_list(choice, src=0)
        if choice[0] is None:
            # Nothing committed yet: every rank starts again from the seed, as a new one does.
            self._build(self.world)  # type: ignore[attr-defined]
            self._journal_peer_restore(None, 0, 0, 0, {})
            return 0
        index, text = choice[0]
        source, m = [self.store, *self.fallbacks][index], Manifest.from_json(text)
        if self.rank == 0:
            self._restore_hook(m.step)  # type: ignore[attr-defined]  # chaos "during: restore"
        use_peers = self.spec.peer_restore != "off"
        held = self.held.at(m.step) if self.held is not None and use_peers else {}
        offers: list[Any] = [None] * self.world
        dist.all_gather_object(offers, sorted(held))
        needed = {r: self.files_to_load(m, r) for r in range(self.world)}  # type: ignore[attr-defined]
        transfers, _ = plan_transfers(needed, {r: list(o or []) for r, o in enumerate(offers)})
        sizes = {f.name: f.size for f in m.files}
        got = exchange(transfers, self.rank, held, sizes)
        files: dict[str, bytes] = {}
        fell_back: dict[str, str] = {}
        from_peer = from_memory = 0
        for name in needed[self.rank]:
            if name not in sizes:
                continue  # the load names what the checkpoint lacks
            entry = m.entry(name)
            data, whence = (held[name], "memory") if name in held else (got.get(name), "peer")
            if name not in held and name not in got:
                fell_back[name] = "peer restore is off" if not use_peers else "no survivor holds it"
            elif data is None or len(data) != entry.size or sha256_hex(data) != entry.sha256:
                fell_back[name] = f"the bytes from {whence} do not match the signed manifest's sha256"
            else:
                files[name] = data
                if whence == "memory":
                    from_memory += len(data)
                else:
                    from_peer += len(data)
        from_store = 0
        if fell_back:
            read = source.read_many(m, list(fell_back))
            from_store = sum(len(v) for v in read.values())
            files |= read
        restored = self._load(source, m, files)  # type: ignore[attr-defined]
        self._journal_peer_restore(m.step, from_peer, from_memory, from_store, fell_back)
        return restored

    def _journal_peer_restore(
        self, step: int | None, from_peer: int, from_memory: int, from_store: int, fell_back: dict[str, str]
    ) -> None:
        import torch.distributed as dist

        mine = (from_peer, from_memory, from_store, sorted(fell_back.items()))
        every: list[Any] = [None] * self.world
        dist.all_gather_object(every, mine)
        if self.rank != 0:
            return
        members = self.member.members
        self.control.event(
            self.gen,
            "peer_restore",
            step=step,
            epoch=self.member.epoch,
            joining=list(members.joining),
            bytes_from_peer=sum(int(e[0]) for e in every),
            bytes_from_memory=sum(int(e[1]) for e in every),
            bytes_from_store=sum(int(e[2]) for e in every),
            from_store=[
                {"rank": r, "file": str(name)[:200], "reason": str(why)[:300]}
                for r, e in enumerate(every)
                for name, why in e[3]
            ][:64],
        )
