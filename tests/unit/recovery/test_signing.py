"""Authenticated checkpoints: only a manifest signed with the run's key is restored,
replicated or counted by retention; the run's secret stays in its 0600 file."""

from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from recovery.keys import controller_keys
from recovery.manifest import MANIFEST_NAME, FileEntry, Manifest
from recovery.replication import ReplicationError, Replicator, replicate, sync_newest
from recovery.signing import (
    FORGED,
    SECRET_FILE,
    UNSIGNED,
    SigningError,
    check,
    load_or_create_secret,
    signed,
)
from recovery.store import CheckpointStore
from tests.support.stores import TEST_KEY, WriteCheckpoint, default_files

RUN = "signed"


def stores(tmp_path: Path, *names: str, key: bytes | None = TEST_KEY) -> list[CheckpointStore]:
    return [CheckpointStore(f"file://{tmp_path}/{n}", region=n, key=key) for n in names]


def plant(store: CheckpointStore, step: int, signature: str | None = None, key: bytes | None = None) -> Manifest:
    """A checkpoint whose files and sha256 digests are all correct, written by someone
    with write access to the store: unsigned, with ``signature``, or signed with ``key``."""
    entries = [store.put(RUN, step, name, blob, 1) for name, blob in default_files(step).items()]
    m = Manifest(RUN, step, 1, tuple(sorted(entries, key=lambda f: f.name)), 1.0, region=store.region)
    if key is not None:
        m = signed(m, key)
    elif signature is not None:
        m = replace(m, signature=signature)
    store.fs.pipe_file(f"{store.step_path(RUN, step)}/{MANIFEST_NAME}", m.to_json().encode())
    return m


FORGERIES = {
    "unsigned": ({}, UNSIGNED),
    "forged": ({"signature": "ab" * 32}, FORGED),
    "another run's key": ({"key": controller_keys(secrets.token_bytes(32), RUN)}, FORGED),
    "not hex": ({"signature": "\u00e9" * 64}, FORGED),
}


@pytest.mark.parametrize("how", sorted(FORGERIES))
def test_a_planted_higher_step_in_another_store_is_never_restored(
    tmp_path: Path, write_checkpoint: WriteCheckpoint, how: str
) -> None:
    kwargs, reason = FORGERIES[how]
    a, b = stores(tmp_path, "a", "b")
    write_checkpoint(a, RUN, 40)
    plant(b, 900, **kwargs)
    assert b.committed_steps(RUN) == [900]  # listed: tools see it
    skipped: list[tuple[str, int, str]] = []
    best = sync_newest(RUN, [a, b], lambda s, step, why: skipped.append((s.region, step, why)))
    assert best is not None and (best[0], best[1].step) == (a, 40)
    assert skipped == [("b", 900, reason)]
    assert not b.verify(RUN, 900).ok


def test_a_store_without_the_key_lists_but_trusts_nothing(tmp_path: Path, write_checkpoint: WriteCheckpoint) -> None:
    (a,) = stores(tmp_path, "a")
    write_checkpoint(a, RUN, 20)
    (keyless,) = stores(tmp_path, "a", key=None)
    assert keyless.committed_steps(RUN) == [20]
    assert keyless.manifest(RUN, 20) is not None
    assert keyless.latest_verified(RUN) is None
    with pytest.raises(SigningError, match="no run key"):
        keyless.commit(RUN, 40, 1, [])


def test_a_planted_checkpoint_is_never_replicated(tmp_path: Path, write_checkpoint: WriteCheckpoint) -> None:
    a, b = stores(tmp_path, "a", "b")
    write_checkpoint(a, RUN, 40)
    forged = plant(a, 60, signature="00" * 32)
    with pytest.raises(ReplicationError, match="signature does not verify"):
        replicate(a, b, forged)
    errors: list[str] = []
    rep = Replicator(RUN, keep_last=3, on_replicated=lambda r: None, on_error=errors.append)
    rep.follow(a, [a, b])
    done = rep.tick()
    assert [r.step for r in done] == [40]  # the run's own newest, not the planted one
    assert b.committed_steps(RUN) == [40]
    assert any("not replicating step 60" in e and FORGED in e for e in errors)


def test_planted_steps_above_the_runs_own_do_not_crowd_them_out_of_replication(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    """More planted steps above the run's own than keep_last: the run's newest is still copied."""
    a, b = stores(tmp_path, "a", "b")
    for step in (20, 40):
        write_checkpoint(a, RUN, step)
    for step in (600, 700, 800, 900):
        plant(a, step)
    errors: list[str] = []
    rep = Replicator(RUN, keep_last=3, on_replicated=lambda r: None, on_error=errors.append)
    rep.follow(a, [a, b])
    assert [r.step for r in rep.tick()] == [40]
    assert b.committed_steps(RUN) == [40] and b.verify(RUN, 40).ok
    assert sum("not replicating step" in e for e in errors) == 4


def test_a_planted_copy_in_the_target_does_not_stop_replication(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    a, b = stores(tmp_path, "a", "b")
    write_checkpoint(a, RUN, 40)
    plant(b, 40)  # the target holds step 40, unsigned: not the run's
    rep = Replicator(RUN, keep_last=3, on_replicated=lambda r: None, on_error=lambda m: None)
    rep.follow(a, [a, b])
    assert [r.step for r in rep.tick()] == [40]
    assert b.verify(RUN, 40).ok  # the run's copy, signed by the target store


def test_retention_neither_counts_nor_deletes_planted_checkpoints(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    (a,) = stores(tmp_path, "a")
    for step in (20, 40, 60):
        write_checkpoint(a, RUN, step)
    for step in (80, 100):
        plant(a, step)
    assert a.retain(RUN, keep=2) == [20]  # 40 and 60 stay: the planted ones push nothing out
    assert a.committed_steps(RUN) == [40, 60, 80, 100]
    assert a.latest_verified(RUN).step == 60  # type: ignore[union-attr]


def test_retention_with_a_wrong_key_deletes_nothing(tmp_path: Path, write_checkpoint: WriteCheckpoint) -> None:
    """A lost or wrong key makes every checkpoint look planted: retention must not empty the store."""
    (a,) = stores(tmp_path, "a")
    for step in (20, 40, 60):
        write_checkpoint(a, RUN, step)
    (wrong,) = stores(tmp_path, "a", key=controller_keys(b"k" * 32, "wrong"))
    assert wrong.retain(RUN, keep=1) == []
    assert a.committed_steps(RUN) == [20, 40, 60]


def test_retention_plan_never_deletes_the_untrusted() -> None:
    from recovery.store import retention_plan

    steps = {20: True, 40: True, 60: True, 80: True, 90: False, 30: False}
    assert retention_plan(steps, keep=2, untrusted={80}) == [20, 30]


def _signed_manifest() -> Manifest:
    files = (FileEntry("model.pt", 10, "a" * 64), FileEntry("state.pt", 3, "b" * 64))
    return signed(Manifest(RUN, 60, 2, files, 123.5, region="r", extra={"world_size": 2}), TEST_KEY)


@pytest.mark.parametrize(
    "change",
    [
        {"step": 61},
        {"run_id": "other"},
        {"attempt": 3},
        {"region": "elsewhere"},
        {"extra": {"world_size": 3}},
        {"version": 3},
        {"committed_at": 124.0},
        {"files": (FileEntry("model.pt", 10, "c" * 64), FileEntry("state.pt", 3, "b" * 64))},
        {"files": (FileEntry("model.pt", 11, "a" * 64), FileEntry("state.pt", 3, "b" * 64))},
        {"files": (FileEntry("model.pt", 10, "a" * 64),)},
    ],
    ids=lambda c: next(iter(c)),
)
def test_tampering_with_any_field_breaks_the_signature(change: dict[str, Any]) -> None:
    m = _signed_manifest()
    assert check(m, TEST_KEY).ok
    assert check(Manifest.from_json(m.to_json()), TEST_KEY).ok  # survives the round trip
    assert check(replace(m, **change), TEST_KEY).reason == FORGED
    assert check(m, controller_keys(b"s" * 32, RUN)).reason == FORGED


def test_a_tampered_manifest_in_a_store_is_skipped(tmp_path: Path, write_checkpoint: WriteCheckpoint) -> None:
    (a,) = stores(tmp_path, "a")
    write_checkpoint(a, RUN, 20)
    write_checkpoint(a, RUN, 40, attempt=1)
    path = f"{a.step_path(RUN, 40)}/{MANIFEST_NAME}"
    d = json.loads(a.fs.cat_file(path))
    d["attempt"] = 9  # passes for a newer generation's, the files untouched
    a.fs.pipe_file(path, json.dumps(d).encode())
    skipped: list[tuple[int, str]] = []
    assert a.latest_verified(RUN, on_skip=lambda s, r: skipped.append((s, r))).step == 20  # type: ignore[union-attr]
    assert skipped == [(40, FORGED)]


def test_keys_are_per_run() -> None:
    secret = b"x" * 32
    assert controller_keys(secret, "a") != controller_keys(secret, "b")
    assert controller_keys(secret, "a") == controller_keys(secret, "a")


# --- the secret -----------------------------------------------------------------------------


def test_the_secret_is_made_once_0600_and_reused(tmp_path: Path) -> None:
    run_dir = str(tmp_path / "runs" / RUN)
    old = os.umask(0o022)
    try:
        secret, created = load_or_create_secret(run_dir)
    finally:
        os.umask(old)
    assert created and len(secret) == 32
    assert stat.S_IMODE(os.stat(os.path.join(run_dir, SECRET_FILE)).st_mode) == 0o600
    assert load_or_create_secret(run_dir) == (secret, False)


def test_a_secret_others_can_read_or_a_damaged_one_is_refused_in_one_line(tmp_path: Path) -> None:
    load_or_create_secret(str(tmp_path))
    path = tmp_path / SECRET_FILE
    path.chmod(0o644)
    with pytest.raises(SigningError, match="readable by others") as info:
        load_or_create_secret(str(tmp_path))
    assert "\n" not in str(info.value) and SECRET_FILE in str(info.value)
    path.chmod(0o600)
    path.write_bytes(b"short")
    with pytest.raises(SigningError, match="damaged"):
        load_or_create_secret(str(tmp_path))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("what", ["fifo", "folder", "link", "dangling link", "oversize"])
def test_a_secret_that_is_no_plain_file_of_its_size_is_refused_never_followed_nor_waited_on(
    tmp_path: Path, what: str
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = run_dir / SECRET_FILE
    theirs = tmp_path / "theirs"
    theirs.write_bytes(secrets.token_bytes(32))
    theirs.chmod(0o600)
    if what == "fifo":
        os.mkfifo(path, 0o600)
    elif what == "folder":
        path.mkdir()
    elif what == "link":
        path.symlink_to(theirs)
    elif what == "dangling link":
        path.symlink_to(tmp_path / "made-through-the-link")
    else:
        path.write_bytes(b"")
        path.chmod(0o600)
        os.truncate(path, 1 << 40)  # sparse: read no further than a byte past a secret
    with pytest.raises(SigningError) as info:
        load_or_create_secret(str(run_dir))
    assert "\n" not in str(info.value) and str(path) in str(info.value)
    assert ("more than 32 bytes" if what == "oversize" else "not a regular file") in str(info.value)
    assert not (tmp_path / "made-through-the-link").exists()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def _controller() -> Any:
    from orchestrator.config.compose import compose
    from orchestrator.control.wiring import build_controller

    # A provider the controller never calls here: only its name and what it declares.
    nothing = SimpleNamespace(name="none", capabilities=frozenset())
    return build_controller(compose([f"run_id={RUN}", "progress=false"]), provider=nothing, run_id=RUN)  # type: ignore[arg-type]


class FakeProvider:
    name = "fake"

    def __init__(self) -> None:
        self.envs: list[dict[str, str]] = []

    def start_runtime(self, cluster: Any, argv: list[str], env: dict[str, str], log_path: str) -> Any:
        self.envs.append(dict(env))
        return type("Proc", (), {"pid": 1})()


def test_the_secret_and_key_reach_no_file_but_run_secret(home: Path) -> None:
    from orchestrator.control.attempt import AttemptRunner
    from orchestrator.control.controller import save_config
    from orchestrator.wire.runkey import ENV
    from providers.base import ClusterHandle

    ctl = _controller()
    ctl.ctx.provider = FakeProvider()
    save_config(ctl.run_dir, ctl.cfg)
    ctl.journal.append("run_started", run_id=RUN)
    ctl._start_above_fences()
    runner = AttemptRunner(ctl.ctx)
    runner._fence(1, 0)
    cluster = ClusterHandle("c", "local-a", "fake", "127.0.0.1:1", {})
    runner.start_runtime(cluster, "local-a", 1)
    store = ctl.stores["local-a"]
    store.commit(RUN, 10, 1, [store.put(RUN, 10, "model.pt", b"w", 1)])
    assert store.latest_verified(RUN).step == 10  # type: ignore[union-attr]
    # The driver gets its generation's keys in its environment, and only there.
    wire = ctl.run_key.for_attempt(1).to_wire()
    assert ctl.provider.envs == [{ENV: wire}]
    secret = (Path(ctl.run_dir) / SECRET_FILE).read_bytes()
    seed = ctl.run_key.fence_seed
    assert seed is not None
    keys = [secret, ctl.run_key.chain, seed, ctl.run_key.generation_key(1)]
    needles = [*keys, *(k.hex().encode() for k in keys if k is not None), wire.encode()]
    scanned = 0
    for root in (home, Path(os.getcwd())):
        for path in root.rglob("*"):
            if path.is_file() and path.name != SECRET_FILE:
                data = path.read_bytes()
                scanned += 1
                assert not any(n in data for n in needles), path
    assert scanned >= 4  # config.json, journal, spec.json, the checkpoint and its manifest


def test_resume_reuses_the_secret(home: Path) -> None:
    first = _controller()
    assert first.secret_created
    again = _controller()
    assert not again.secret_created
    assert again.run_key == first.run_key


# --- the key on its way -------------------------------------------------------------------------


def test_result_never_names_a_planted_checkpoint_as_the_runs_newest(
    tmp_path: Path, write_checkpoint: WriteCheckpoint
) -> None:
    """A failed run's result.json names its newest checkpoint from the stores: the run's own."""
    from orchestrator.runstate.result import _newest_committed

    a, b = stores(tmp_path, "a", "b")
    write_checkpoint(a, RUN, 40)
    write_checkpoint(b, RUN, 20)
    plant(a, 900)
    plant(b, 800, key=controller_keys(secrets.token_bytes(32), RUN))
    assert _newest_committed(RUN, {"a": a, "b": b}) == a.checkpoint_url(RUN, 40)
    assert _newest_committed(RUN, {"b": b}) == b.checkpoint_url(RUN, 20)
    assert _newest_committed(RUN, {"b": stores(tmp_path, "b", key=None)[0]}) is None
