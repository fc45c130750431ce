"""A search snapshot as its store holds it: search.json, and the trial checkpoints it names."""

from __future__ import annotations

import io
import json
import tarfile

from orchestrator.runtime.search.trial_store import TrialRef, fetch_trial
from recovery.manifest import Manifest
from recovery.store import CheckpointStore


def search_json(archive: bytes) -> dict:
    """A search snapshot's search.json (its records, rungs, searcher's log, PBT's decisions)."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        member = tar.extractfile("search.json")
        assert member is not None
        return json.loads(member.read())


def named_trials(store: CheckpointStore, run_id: str, manifest: Manifest, max_t: int) -> dict[str, dict[str, bytes]]:
    """The trial checkpoints the snapshot of ``manifest`` names, each read from ``store``
    and verified (signed, its digest the one the snapshot gives); the archive holds no
    trial's files (it names them, and the manifest names them too)."""
    archive = store.read(manifest, "experiment.tar")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        assert tar.getnames() == ["search.json"], tar.getnames()
    named = search_json(archive).get("checkpoints", {})
    assert manifest.extra["checkpoints"] == named
    out: dict[str, dict[str, bytes]] = {}
    for trial_id, raw in named.items():
        files, why = fetch_trial([store], run_id, trial_id, TrialRef.from_json(raw, max_t))
        assert files is not None, why
        out[trial_id] = files
    return out
