"""A search snapshot planted in a store never reaches Tune: its ``tuner.pkl`` (a pickle
that runs code when loaded) is never even unpacked, whatever step it claims."""

from __future__ import annotations

import io
import os
import pickle
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.runtime.control import ControlChannel
from orchestrator.runtime.tune_loop import ARCHIVE, _restore
from recovery.manifest import MANIFEST_NAME
from recovery.signing import derive_run_key
from recovery.store import CheckpointStore
from support import loop_spec
from tests.unit.conftest import TEST_KEY

pytestmark = pytest.mark.unit
RUN = "search"


class Payload:
    """What an attacker pickles: loading it runs a command (here: touches a marker)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def archive(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def plant(store: CheckpointStore, step: int, data: bytes, signature: str) -> None:
    """A snapshot committed by someone with write access to the store: files and a
    manifest whose digests are right, with ``signature`` in place of the run's."""
    manifest = store.commit(RUN, step, attempt=1, files=[store.put(RUN, step, ARCHIVE, data)])
    forged = replace(manifest, signature=signature)
    store.fs.pipe_file(f"{store.step_path(RUN, step)}/{MANIFEST_NAME}", forged.to_json().encode())


@pytest.mark.parametrize("how", ["unsigned", "another run's key", "a forged signature"])
def test_a_planted_search_snapshot_is_never_unpacked(tmp_path: Path, how: str) -> None:
    marker = tmp_path / "ran"
    evil = archive({"search/tuner.pkl": pickle.dumps(Payload(marker)), "search/scheduler_state.pkl": b"x"})
    spec = loop_spec(tmp_path, RUN, 2, {"name": "digits_hpo", "workload": "digits", "steps": 100})
    ours = CheckpointStore(spec.store_url, region="r", key=TEST_KEY)
    legit = archive({"search/experiment_state.json": b"{}"})
    ours.commit(RUN, 20, attempt=1, files=[ours.put(RUN, 20, ARCHIVE, legit)])

    if how == "another run's key":
        planter = CheckpointStore(spec.store_url, region="r", key=derive_run_key(b"\1" * 32, RUN))
        planter.commit(RUN, 900, attempt=1, files=[planter.put(RUN, 900, ARCHIVE, evil)])
    else:
        planter = CheckpointStore(spec.store_url, region="r", key=TEST_KEY)
        plant(planter, 900, evil, signature="" if how == "unsigned" else "ab" * 32)

    control = ControlChannel(spec.control_url)
    exp_dir = tmp_path / "exp"
    step, url = _restore(spec, control, str(exp_dir))

    assert step == 20 and url is not None and url.endswith("/step-20")
    assert sorted(p.name for p in exp_dir.rglob("*") if p.is_file()) == ["experiment_state.json"]
    assert not marker.exists()
    skipped = [e for e in control.read_events(spec.generation, set()) if e["type"] == "checkpoint_skipped"]
    assert [e["step"] for e in skipped] == [900]
    assert "not written by this run" in skipped[0]["reason"]
    # The payload is real: loading it is what the restore never did.
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.exists()
