"""What the controller can prove of a run's end, whatever its cluster wrote.

A runtime that exits 0 writes ``final.json`` into the control folder, which a cluster
(or anyone who can write there) may also forge: ``final_step`` a billion, a
``final_checkpoint`` of ``file:///etc/passwd``, any ``weights_sha256``. So a success is
taken only with a proof: the newest checkpoint of this run that is signed with the
run's key and on its lineage, in any of its stores. From it, not from ``final.json``,
come ``final_step``, ``final_checkpoint`` and the weights' or checkpoint's digest; what
``final.json`` claims of them must agree, and an outcome that cannot be proven is a
failure of the attempt (``outcome_unproven``), never SUCCEEDED with what it claimed.

The rules (``prove``) are pure; ``newest_signed`` reads the stores.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from recovery.boundedjson import INT64
from recovery.fencing import Admits
from recovery.manifest import Manifest, checkpoint_digest
from recovery.replication import ReplicationError, named_parts
from recovery.store import CheckpointStore, StoreError, part_of, step_dir_name

_SHA256 = re.compile(r"[0-9a-f]{64}")
LOOP, FUNC, SEARCH, FUNC_SEARCH = "loop", "train_func", "search", "search_train_func"
# What result.json takes from a proof, never from final.json alone.
PROVEN_KEYS = frozenset({"final_step", "final_checkpoint", "weights_sha256", "checkpoint_sha256"})


@dataclass(frozen=True)
class Signed:
    """The newest signed checkpoint on the lineage, and every store that holds it signed
    (replication puts one step in several): ``url`` is the first of ``urls``."""

    manifest: Manifest
    url: str
    urls: tuple[str, ...] = ()

    def where(self, claimed: object) -> str:
        """The claimed location when it is one of the stores that hold this checkpoint
        signed, else the first such store (never a location no signed manifest backs)."""
        return claimed if isinstance(claimed, str) and claimed in self.urls else self.url


@dataclass(frozen=True)
class Proven:
    """What ``result.json`` may say of the end, each value backed by a signed manifest."""

    final_step: int
    final_checkpoint: str | None
    weights_sha256: str | None = None
    checkpoint_sha256: str | None = None
    # A search's: where its best trial's last checkpoint is, as the signed snapshot names it,
    # and every trial's (trial id -> where).
    best_checkpoint: str | None = None
    trial_checkpoints: dict[str, str] | None = None

    def apply(self, final: Mapping[str, Any] | None) -> dict[str, Any]:
        """``final.json``'s other fields (metrics, telemetry) with the proven values in place
        (a search's ``best_trial.checkpoint`` too: only ever the proven one, or none)."""
        out = {
            **dict(final or {}),
            "final_step": self.final_step,
            "final_checkpoint": self.final_checkpoint,
            "weights_sha256": self.weights_sha256,
            "checkpoint_sha256": self.checkpoint_sha256,
        }
        if isinstance(out.get("best_trial"), dict):
            out["best_trial"] = {**out["best_trial"], "checkpoint": self.best_checkpoint}
        if isinstance(out.get("trials"), list):
            where = self.trial_checkpoints or {}
            out["trials"] = [
                {**t, "checkpoint": where.get(str(t.get("trial_id")))} if isinstance(t, dict) else t
                for t in out["trials"]
            ]
        return out


class Unproven(ValueError):
    """Why an outcome cannot be taken; one line."""


def newest_signed(stores: Iterable[CheckpointStore], run_id: str, lineage: Admits) -> Signed | None:
    """The highest step any store holds whose manifest is signed with the run's key and on
    the lineage, with every store holding that step so (its files are not read: the
    signature covers their digests)."""
    found: list[tuple[Manifest, str]] = []
    for store in stores:
        try:
            for step in store.candidates(run_id):
                if found and step < found[0][0].step:
                    break
                m, verdict = store.trusted_manifest(run_id, step)
                if m is not None and verdict.ok and lineage.allows(m.attempt, m.step):
                    if found and m.step > found[0][0].step:
                        found.clear()
                    found.append((m, store.checkpoint_url(run_id, step)))
                    break
        except StoreError:
            continue  # a store that does not answer proves nothing; another may
    if not found:
        return None
    return Signed(found[0][0], found[0][1], tuple(url for _, url in found))


def prove(mode: str, total: int, final: Mapping[str, Any] | None, signed: Signed | None) -> Proven:
    """The end the run can stand behind, or Unproven with the reason.

    ``mode``: LOOP (the built-in loop commits a checkpoint at its last step, whose
    manifest carries the weights' digest), FUNC (a user's function: its newest
    checkpoint, if it made any, the digest of its files, and the digest of the model in
    it that the last attempt read back), SEARCH (the experiment's
    newest checkpoint and the trial records it carries: the best trial's weights digest),
    FUNC_SEARCH (the same over a train function: the best trial's checkpoint digest).
    ``total``: the run's last step."""
    claims = dict(final or {})
    step = claims.get("final_step")
    # A function's steps are its reports, as many as it makes: only the built-in loop and a
    # search have a last step to bound them by.
    top = INT64[1] if mode == FUNC else total
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= top):
        raise Unproven(f"final.json claims final_step {str(step)[:32]}, outside 0..{top}")
    if mode == FUNC:
        return _func(claims, signed)
    if signed is None:
        raise Unproven("no signed checkpoint of this run on its lineage in any store")
    m = signed.manifest
    digest = None
    if mode == LOOP:
        if m.step != total:
            raise Unproven(f"the newest signed checkpoint is at step {m.step}, not the last step {total}")
        weights = m.extra.get("weights_sha256")
    elif mode == FUNC_SEARCH:
        weights, digest = None, _function_search_digest(m, _best_record(m, claims))
    else:
        weights = _best_record(m, claims).get("weights_sha256")
    if mode != FUNC_SEARCH and not (isinstance(weights, str) and _SHA256.fullmatch(weights)):
        raise Unproven(f"the checkpoint at step {m.step} names no weights digest")
    where = signed.where(claims.get("final_checkpoint"))
    _agree(claims, "final_step", m.step)
    _agree(claims, "weights_sha256", weights)
    if mode == FUNC_SEARCH:
        _agree(claims, "checkpoint_sha256", digest)
    _agree(claims, "final_checkpoint", where)
    if mode == LOOP:
        return Proven(m.step, where, weights, digest)
    trials = trial_checkpoints(m, where)
    best = claims.get("best_trial")
    best_id = best.get("trial_id") if isinstance(best, dict) else None
    return Proven(m.step, where, weights, digest, trials.get(str(best_id)), trials)


def trial_checkpoints(m: Manifest, where: str) -> dict[str, str]:
    """Where each trial's checkpoint that the signed snapshot ``m`` (at ``where``) names
    is: beside it in the same store, by trial id; none for a malformed entry."""
    root, sep, _ = where.partition(f"/{m.run_id}/checkpoints/")
    try:
        parts = named_parts(m) if sep else []
    except ReplicationError:
        return {}
    prefix = part_of(m.run_id, "")
    return {run[len(prefix) :]: f"{root}/{run}/checkpoints/{step_dir_name(s, a)}" for run, s, a in parts}


def _func(claims: dict[str, Any], signed: Signed | None) -> Proven:
    step = claims.get("final_step")
    if signed is None:
        if claims.get("final_checkpoint") or claims.get("checkpoint_sha256") or claims.get("weights_sha256"):
            raise Unproven("final.json names a checkpoint, and no store holds a signed one of this run")
        return Proven(int(step or 0), None)
    digest = checkpoint_digest({f.name: f.sha256 for f in signed.manifest.files})
    where = signed.where(claims.get("final_checkpoint"))
    _agree(claims, "checkpoint_sha256", digest)
    _agree(claims, "final_checkpoint", where)
    if step is not None and step < signed.manifest.step:
        raise Unproven(f"final.json claims final_step {step}, before its checkpoint at {signed.manifest.step}")
    # The model's digest in that checkpoint, as the attempt that ends the run read it back
    # (its files are the ones the signature covers): taken only with the checkpoint proven.
    weights = claims.get("weights_sha256")
    if weights is not None and not (isinstance(weights, str) and _SHA256.fullmatch(weights)):
        raise Unproven(f"final.json claims a weights digest that is not one: {str(weights)[:32]}")
    return Proven(int(step if step is not None else signed.manifest.step), where, weights, digest)


def _function_search_digest(m: Manifest, best: dict[str, Any]) -> str | None:
    """A search over a train function: the best trial's newest checkpoint digest, as the
    experiment's signed checkpoint records it (none for a trial that never checkpointed)."""
    digest = best.get("checkpoint_sha256")
    if digest is None and best.get("checkpoint_iteration") is not None:
        raise Unproven(f"the checkpoint at step {m.step} names no weights digest")
    if digest is not None and not (isinstance(digest, str) and _SHA256.fullmatch(digest)):
        raise Unproven(f"the checkpoint at step {m.step} names no checkpoint digest of its best trial")
    return digest


def _best_record(m: Manifest, claims: dict[str, Any]) -> dict[str, Any]:
    """The best trial's record, as the experiment's signed checkpoint holds it."""
    best = claims.get("best_trial")
    trial_id = best.get("trial_id") if isinstance(best, dict) else None
    trials = m.extra.get("trials")
    if not isinstance(trials, list):
        raise Unproven(f"the checkpoint at step {m.step} holds no trial records")
    for record in trials:
        if isinstance(record, dict) and record.get("trial_id") == trial_id:
            return record
    raise Unproven(f"the best trial {str(trial_id)[:64]!r} is not among the signed checkpoint's trials")


def _agree(claims: dict[str, Any], key: str, proven: object) -> None:
    claimed = claims.get(key)
    if claimed is not None and claimed != proven:
        raise Unproven(f"final.json claims {key} {str(claimed)[:80]!r}; the signed checkpoint says {proven!r}")
