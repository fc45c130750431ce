"""Survivors keep their processes: leave the broken group, re-form it, restore from peers.

When Ray Train replaces a lost worker and leaves the others running (see
orchestrator/runtime/group/rendezvous.py), each survivor meets the loss as a failed
collective. It waits for what it handed its uploader to be committed, leaves the broken
group, waits for the driver's next epoch and joins it with the replacement. Then every
rank restores the newest committed checkpoint: the bytes a rank holds in memory for it
(``peer_state.HeldSnapshots``) are used where they match the signed manifest, a rank
that lacks a file gets it from a rank that holds it, and only what no rank holds (or
what fails the check) is read from the store. The model, optimizer and data loader of a
survivor are the ones it had; its RNG states and position roll back to the checkpoint's.

``GroupRecovery`` is a helper the training loop holds (one per worker that joined the
group through the driver's rendezvous); what it needs of the loop, the loop hands it:
the settling of its uploads, and a ``Restorable`` (the files each rank loads, the load).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from typing import Any, Protocol

from orchestrator.runtime.checkpoint.restore_failure import READ_ERRORS, restore_failure
from orchestrator.runtime.group.peer_state import HeldSnapshots, exchange
from orchestrator.runtime.group.rendezvous import GroupMember, Refused
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.spec import RuntimeSpec
from recovery.fencing import Admits, FencedError
from recovery.manifest import Manifest
from recovery.membership import plan_transfers
from recovery.store import CheckpointStore, sha256_hex

# What a restore may take, and from which stores (the loop's ``restore_rule``).
RestoreRule = Callable[[], tuple[Admits, list[CheckpointStore]]]


class Restorable(Protocol):
    """What the restore from peers asks of the training loop."""

    def peer_files(self, m: Manifest, rank: int) -> list[str]:
        """The files of checkpoint ``m`` that ``rank`` takes from memory or a peer."""
        ...

    def streamed_files(self, m: Manifest) -> set[str]:
        """The files of ``m`` the load streams from the store itself when not handed them."""
        ...

    def read_streamed(self, source: CheckpointStore, m: Manifest, files: dict[str, bytes]) -> Any:
        """What the load streams from ``source`` itself (``streamed_files`` not in ``files``),
        read and verified now, before any rank loads: None where there is nothing such.
        Raises as a store read does (ManifestError, StoreError)."""
        ...

    def load_files(self, source: CheckpointStore, m: Manifest, files: dict[str, bytes], streamed: Any = None) -> int:
        """Load checkpoint ``m`` from ``files`` and ``streamed`` (``read_streamed``'s; any
        other file read from ``source``); its step."""
        ...

    def start_from_seed(self) -> None:
        """Build again from the seed, as a new process does (nothing committed yet)."""
        ...

    def before_restore(self, step: int) -> None:
        """Rank 0, a checkpoint chosen, before a byte of it is read (chaos "during: restore")."""
        ...


class GroupRecovery:
    """One rank's way back into the group after a lost peer, and its restore from peers."""

    def __init__(
        self,
        spec: RuntimeSpec,
        control: ControlChannel,
        rank: int,
        member: GroupMember,
        stores: list[CheckpointStore],
        rule: RestoreRule,
    ) -> None:
        self.spec, self.control, self.rank, self.member = spec, control, rank, member
        self.gen = spec.generation
        self.stores = stores
        self.rule = rule
        # This rank's newest checkpoints' bytes: a rank lost before the next one is served from here.
        self.held = HeldSnapshots()

    @property
    def epoch(self) -> int:
        return self.member.epoch

    @property
    def joining(self) -> bool:
        """Whether this rank's group formed around survivors (its state comes from peers)."""
        return self.member.members is not None and self.member.members.mode == "join"

    def rejoin(self, exc: BaseException, step: int, settle: Callable[[], None]) -> int:
        """Out of the broken group and into the next epoch's; the world size there.
        ``settle``: until what this rank handed over is committed (or failed)."""
        left = self.member.epoch
        try:
            # What this rank handed over is committed (or failed) before the choice is made.
            settle()
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
        return len(members.pids)

    # --- the restore from peers ----------------------------------------------------------
    def newest_committed(self, passed_over: Collection[tuple[int, int]] = ()) -> tuple[int, str] | None:
        """Rank 0: the newest checkpoint committed on the lineage, by its signed manifest
        alone (its files are checked as they are loaded, wherever they come from), but
        those ``passed_over`` (store index, step): a rank found one of their files bad."""
        lineage, usable = self.rule()
        best: tuple[int, Manifest] | None = None
        for i, store in enumerate(self.stores):
            if store not in usable:
                continue
            try:
                steps = store.candidates(self.spec.run_id)
            except Exception:  # an unreachable store tells nothing: the others still count
                continue
            for step in steps:
                if best is not None and step <= best[1].step:
                    break
                if (i, step) in passed_over:
                    continue
                m, verdict = store.trusted_manifest(self.spec.run_id, step)
                if m is not None and verdict.ok and lineage.allows(m.attempt, m.step):
                    best = (i, m)
                    break
                why = verdict.reason if not verdict.ok or m is None else lineage.why_not(m.attempt, m.step)
                self.control.event(self.gen, "checkpoint_skipped", step=step, reason=why, region=store.region)
        return None if best is None else (best[0], best[1].to_json())

    def peer_restore(self, world: int, loop: Restorable) -> int:
        """(All ``world`` ranks of a group formed around survivors.) The newest committed
        checkpoint, each file from this rank's memory, a peer's, or the store; the step
        restored. A file of it that no rank holds and that fails its check in the store
        (or cannot be read there) on any rank makes the whole group pass over that
        checkpoint together, before any rank loads, the skip journaled with the rank and
        its reason, and take the next."""
        import torch.distributed as dist

        passed_over: set[tuple[int, int]] = set()
        while True:
            choice: list[Any] = [self.newest_committed(passed_over) if self.rank == 0 else None]
            dist.broadcast_object_list(choice, src=0)
            if choice[0] is None:
                # Nothing committed yet: every rank starts again from the seed, as a new one does.
                loop.start_from_seed()
                self._journal_peer_restore(world, None, 0, 0, 0, {})
                return 0
            index, text = choice[0]
            m = Manifest.from_json(text)
            restored = self._restore_from(world, loop, index, m)
            if restored is not None:
                return restored
            passed_over.add((index, m.step))

    def _restore_from(self, world: int, loop: Restorable, index: int, m: Manifest) -> int | None:
        """Checkpoint ``m`` of store ``index`` restored on every rank; None (and nothing
        loaded) where a rank found one of its files bad in the store."""
        import torch.distributed as dist

        source = self.stores[index]
        if self.rank == 0:
            loop.before_restore(m.step)
        use_peers = self.spec.peer_restore != "off"
        held = self.held.at(m.step) if use_peers else {}
        offers: list[Any] = [None] * world
        dist.all_gather_object(offers, sorted(held))
        needed = {r: loop.peer_files(m, r) for r in range(world)}
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
        # What the load streams itself (a replacement's shards, to its node's disk) is not
        # read whole into memory here; it is counted from the store all the same.
        streamed = loop.streamed_files(m)
        from_store = sum(sizes[name] for name in fell_back if name in streamed)
        fetch = [name for name in fell_back if name not in streamed]
        failure: str | None = None
        read_ahead: Any = None
        try:
            if fetch:
                read = source.read_many(m, fetch)
                from_store += sum(len(v) for v in read.values())
                files |= read
            read_ahead = loop.read_streamed(source, m, files)
        except READ_ERRORS as exc:
            failure = restore_failure(exc, self.rank)
        verdicts: list[Any] = [None] * world
        dist.all_gather_object(verdicts, failure)
        bad = next((why for why in verdicts if why), None)
        if bad is not None:
            if read_ahead is not None:
                read_ahead.close()
            if self.rank == 0:
                self.control.event(self.gen, "checkpoint_skipped", step=m.step, reason=bad, region=source.region)
            return None
        restored = loop.load_files(source, m, files, read_ahead)
        self._journal_peer_restore(world, m.step, from_peer, from_memory, from_store, fell_back)
        return restored

    def _journal_peer_restore(
        self,
        world: int,
        step: int | None,
        from_peer: int,
        from_memory: int,
        from_store: int,
        fell_back: dict[str, str],
    ) -> None:
        import torch.distributed as dist

        mine = (from_peer, from_memory, from_store, sorted(fell_back.items()))
        every: list[Any] = [None] * world
        dist.all_gather_object(every, mine)
        if self.rank != 0:
            return
        members = self.member.members
        assert members is not None, "a group formed around survivors has its members"
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
