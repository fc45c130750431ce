"""Hostile plants for a real run: what someone with write access to a store or to the
control channel leaves there before the run starts, and the checks that none of it
changed the run (its weights, its state, what it restored, what ran)."""

from __future__ import annotations

import json
import os
import pickle
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestrator.runstate.rundir import CONTROL_DIR, make_control_dir, make_run_dir
from recovery.manifest import MANIFEST_NAME, FileEntry, Manifest
from recovery.signing import run_keys_of, signed
from recovery.store import sha256_hex

REGIONS = ("local-a", "local-b", "local-c")
# Above anything the run itself commits: each would win a restore that trusted it.
FORGED_STEPS = {600: "a copied manifest (its signature no longer matches)", 700: "unsigned", 800: "another run's key"}
PAYLOAD_STEP = 900


class Payload:
    """A pickle that runs a command when loaded: touches the marker."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def plant_checkpoints(home: Path, run_id: str, donor: Path, marker: Path) -> None:
    """In every region's store, checkpoints of ``run_id`` above anything it will write:
    another finished run's real checkpoint (``donor``: its run folder) relabelled,
    unsigned, or signed with that run's own key; and one whose ``model.pt`` is a pickle
    payload, its digest and size right."""
    donor_id = donor.name
    src_store = home / "stores" / "local-a" / donor_id / "checkpoints"
    newest = max(int(p.name.split("-")[1]) for p in src_store.glob("step-*") if (p / MANIFEST_NAME).exists())
    src = src_store / f"step-{newest}"
    original = Manifest.from_json((src / MANIFEST_NAME).read_text())
    files = {f.name: (src / f.name).read_bytes() for f in original.files}
    donor_key = run_keys_of(str(donor))
    payload = pickle.dumps(Payload(marker))
    for region in REGIONS:
        root = home / "stores" / region / run_id / "checkpoints"
        for step in (*FORGED_STEPS, PAYLOAD_STEP):
            blobs = dict(files)
            if step == PAYLOAD_STEP:
                blobs["model.pt"] = payload
            entries = tuple(FileEntry(n, len(b), sha256_hex(b)) for n, b in sorted(blobs.items()))
            m = replace(original, run_id=run_id, step=step, files=entries, region=region, committed_at=time.time())
            if step == 700 or step == PAYLOAD_STEP:
                m = replace(m, signature="")
            elif step == 800:
                m = signed(m, donor_key)
            folder = root / f"step-{step}"
            folder.mkdir(parents=True, exist_ok=True)
            for name, data in blobs.items():
                (folder / name).write_bytes(data)
            (folder / MANIFEST_NAME).write_text(m.to_json())


FORGED_EVENTS: list[dict[str, Any]] = [
    {"type": "transition", "to": "SUCCEEDED", "from": "RUNNING"},
    {"type": "fence", "generation": 99, "lineage": [[99, 0]]},
    {"type": "teardown", "cluster": "orch-foreign-cluster"},
    {"type": "train_started", "restored_step": "not a number"},
]


def plant_control(run_dir: Path, generations: int) -> None:
    """In the run's control channel, before it starts: forged controller events, a
    malformed event and garbage where a heartbeat goes, for each generation to come."""
    old = os.umask(0o077)
    try:
        make_run_dir(str(run_dir))  # as the controller makes it: private
        make_control_dir(str(run_dir))
    finally:
        os.umask(old)
    for gen in range(1, generations + 1):
        events = run_dir / CONTROL_DIR / f"g{gen}" / "events"
        events.mkdir(parents=True, exist_ok=True)
        for ev in FORGED_EVENTS:
            name = f"{time.time():017.6f}-{uuid.uuid4().hex[:8]}.json"
            (events / name).write_text(json.dumps({**ev, "generation": gen}))
        (events / "not-an-event.json").write_text("{}")
        (events.parent / "exit.json").write_text("[1, 2, 3")


def assert_nothing_planted_won(run: Any, marker: Path) -> None:
    """The run restored only its own checkpoints, said why it passed over the planted
    ones, ran no payload, named its own final checkpoint, and took no forged event as
    the controller's own."""
    r = run.result
    assert not marker.exists(), "a pickle payload planted in a store ran"
    assert not any(f"/step-{s}" in str(r["final_checkpoint"]) for s in (*FORGED_STEPS, PAYLOAD_STEP)), r
    for inc in r["incidents"]:
        assert inc["restored_step"] is None or inc["restored_step"] < min(FORGED_STEPS), inc
    restored = [e.get("restored_step") for e in run.events("train_started")]
    assert all(s is None or s < min(FORGED_STEPS) for s in restored), restored
    skipped = run.events("checkpoint_skipped")
    seen = {e["step"] for e in skipped if "not written by this run" in str(e.get("reason", ""))}
    assert {*FORGED_STEPS, PAYLOAD_STEP} <= seen, skipped
    journal = run.journal()
    assert run.events("control_invalid"), "forged control objects were not journaled"
    assert not [e for e in journal if e["type"] == "fence" and e.get("generation") == 99], "a forged fence was taken"
    assert not [e for e in journal if e["type"] == "teardown" and e.get("cluster") == "orch-foreign-cluster"]
    assert [e["to"] for e in journal if e["type"] == "transition"][-1] == "SUCCEEDED"


def assert_private(run: Any, home: Path) -> None:
    """The run's folder, state files and checkpoints are the user's alone."""
    run_dir = Path(run.run_dir)
    assert (os.stat(run_dir).st_mode & 0o077) == 0, oct(os.stat(run_dir).st_mode)
    for name in ("journal.jsonl", "result.json", "config.json", "run.secret"):
        assert (os.stat(run_dir / name).st_mode & 0o077) == 0, name
    region = run.result["region"]
    ours = home / "stores" / region / run_dir.name / "checkpoints"
    final = [p for p in ours.glob("step-*") if int(p.name.split("-")[1]) < min(FORGED_STEPS)]
    assert final
    for path in final:
        assert (os.stat(path).st_mode & 0o077) == 0, path
        for f in path.iterdir():
            assert (os.stat(f).st_mode & 0o077) == 0, f
