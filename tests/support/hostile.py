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
    src = max(src_store.glob(f"step-{newest}-g*"), key=lambda p: int(p.name.rsplit("-g", 1)[1]))
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


# --- malformed manifests, forged fences and special files (the second round) ----------------

# Above anything the run commits: a nested manifest, one with a number past any float, a
# MANIFEST.json FIFO, a step folder whose files are special and whose manifest is a
# /dev/zero symlink, a step folder that is a symlink loop, a MANIFEST.json symlink loop.
MALFORMED_STEPS = {
    610: "deeply nested JSON",
    620: "a number past any float (1e999)",
    630: "a MANIFEST.json FIFO",
    640: "special files, its manifest a /dev/zero symlink",
    650: "a step folder that is a symlink loop",
    660: "a MANIFEST.json symlink loop",
}
# Which steps a reader can journal: a looping step folder holds no manifest anyone can list.
JOURNALED_MALFORMED = frozenset(MALFORMED_STEPS) - {650}
NESTED = '{"a":' * 20_000 + "1" + "}" * 20_000


def plant_malformed_manifests(home: Path, run_id: str) -> None:
    """In every region's store, step folders above the run's own holding what a manifest
    reader must skip without hanging, crashing or following a link (MALFORMED_STEPS)."""
    for region in REGIONS:
        root = home / "stores" / region / run_id / "checkpoints"
        root.mkdir(parents=True, exist_ok=True)
        for step in MALFORMED_STEPS:
            folder = root / f"step-{step}"
            if step == 650:
                folder.symlink_to(folder)
                continue
            folder.mkdir(exist_ok=True)
            manifest = folder / MANIFEST_NAME
            if step == 610:
                manifest.write_text(NESTED)
            elif step == 620:
                manifest.write_text(
                    json.dumps({"run_id": run_id, "step": step, "attempt": 1, "files": [], "committed_at": 1.0})
                    .replace('"committed_at": 1.0', '"committed_at": 1e999')
                    .replace(f'"step": {step}', '"step": 1e999')
                )
            elif step == 630:
                os.mkfifo(manifest)
            elif step == 640:
                os.mkfifo(folder / "model.pt")
                (folder / "optimizer.pt").symlink_to("/dev/zero")
                (folder / "state.pt").symlink_to(folder / "state.pt")
                manifest.symlink_to("/dev/zero")
            else:
                manifest.symlink_to(manifest)


def forged_fence(run_id: str, generation: int = 99) -> bytes:
    """A well-formed fence of ``run_id`` at ``generation``, signed by a controller of
    another life of the run (another secret): it must verify under no key of this run."""
    from recovery.fencing import Lineage, encode_fence
    from recovery.keys import controller_keys

    lineage = Lineage().then(generation, 450)
    return encode_fence(run_id, lineage, controller_keys(os.urandom(32), run_id).sign_fence)


# One store each: a forged high fence, garbage, a symlink loop.
FENCE_PLANTS = ("forged", "garbage", "loop")


def plant_fences(home: Path, run_id: str, order: tuple[str, ...] = FENCE_PLANTS) -> dict[str, str]:
    """A FENCE.json in every store that this run's controller did not write; what each is, by region."""
    planted = {}
    for region, kind in zip(REGIONS, order, strict=True):
        path = home / "stores" / region / run_id / "FENCE.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.exists():
            path.unlink()
        if kind == "forged":
            path.write_bytes(forged_fence(run_id))
        elif kind == "garbage":
            path.write_bytes(b'{"links": [[99, 1e999]], "signature": ' + b"[" * 5000)
        else:
            path.symlink_to(path)
        planted[region] = kind
    return planted


# Event files named as the runtime names its events, each something no reader may open.
SPECIAL_EVENTS = ("0000000001.000000-0000dead.json", "0000000001.000001-0000beef.json")


def plant_special_control(run_dir: Path, generations: int) -> None:
    """In the run's control channel: for each generation to come, its heartbeat a FIFO,
    its exit.json a FIFO, its final.json a /dev/zero symlink, an event a /dev/zero symlink,
    another a symlink loop, and a folder that loops back on itself."""
    control = run_dir / CONTROL_DIR
    control.mkdir(parents=True, exist_ok=True)
    for gen in range(1, generations + 1):
        g = control / f"g{gen}"
        events = g / "events"
        events.mkdir(parents=True, exist_ok=True)
        for name, plant in (("heartbeat.json", os.mkfifo), ("exit.json", os.mkfifo)):
            if not (g / name).exists():
                plant(g / name)
        if not (g / "final.json").is_symlink():
            (g / "final.json").symlink_to("/dev/zero")
        (events / SPECIAL_EVENTS[0]).symlink_to("/dev/zero")
        (events / SPECIAL_EVENTS[1]).symlink_to(events / SPECIAL_EVENTS[1])
        (g / "loop").symlink_to(g)
    (control / "loop").symlink_to(control / "loop")


def _control_json(path: Path) -> dict[str, Any] | None:
    try:
        if not path.is_file() or path.is_symlink():
            return None
        got = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def kill_driver_with_a_forged_outcome(
    home: Path, run_id: str, *overrides: str, at_step: int = 120, timeout: float = 400
) -> tuple[Any, dict[str, Any]]:
    """A run in the background; once its first generation has trained past ``at_step``,
    an exit.json (code 0) and a final.json claiming a forged end are written into that
    generation's control folder, then its driver (the heartbeat's pid) is SIGKILLed.
    The run as it ended, and what was forged."""
    import signal
    import subprocess
    import sys

    from tests.support.paths import REPO
    from tests.support.runs import Run, env_for

    argv = [sys.executable, "-m", "orchestrator", "job=digits", f"run_id={run_id}", "progress=false", *overrides]
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env_for(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    g1 = home / "runs" / run_id / CONTROL_DIR / "g1"
    forged = {
        "time": time.time(),
        "generation": 1,
        "final_step": 10**12,
        "weights_sha256": "f" * 64,
        "final_checkpoint": "file:///etc/passwd",
    }
    deadline = time.monotonic() + timeout
    try:
        while True:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the run ended before its driver could be killed: {proc.returncode}")
            beat, progress = _control_json(g1 / "heartbeat.json"), _control_json(g1 / "progress.json")
            if beat and progress and beat.get("pid") and int(progress.get("step", 0)) >= at_step:
                break
            time.sleep(0.2)
        forged["time"] = time.time()
        (g1 / "final.json").write_text(json.dumps(forged))
        (g1 / "exit.json").write_text(json.dumps({"time": time.time(), "generation": 1, "code": 0}))
        os.kill(int(beat["pid"]), signal.SIGKILL)
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    run_dir = home / "runs" / run_id
    result_path = run_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    return Run(proc.returncode, out, err, run_dir, result), forged
