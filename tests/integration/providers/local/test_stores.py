"""cloud=local_cloudstores with nothing started by hand: the run starts its own S3 and
GCS servers, checkpoints in both, and leaves none of them running."""

from __future__ import annotations

import json
import os

import pytest

from tests.support.runs import orchestrate

pytestmark = pytest.mark.integration

OWN_SERVERS = ("ORCH_LOCAL_S3_A", "ORCH_LOCAL_S3_B", "ORCH_LOCAL_GCS_C", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_local_cloudstores_starts_and_stops_its_servers(tmp_path, monkeypatch) -> None:
    for name in OWN_SERVERS:
        monkeypatch.delenv(name, raising=False)
    run = orchestrate(tmp_path, "stores", "cloud=local_cloudstores", "job.steps=60")
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.result["status"] == "SUCCEEDED"
    started = json.loads((run.run_dir / "local_stores.json").read_text())
    assert sorted(started["ports"]) == ["local-a", "local-b", "local-c"]
    assert len(started["pids"]) == 3 and not any(alive(pid) for pid in started["pids"])
    # S3 (moto, in memory) held the first copy; fake-gcs-server's files hold the GCS replica.
    assert "checkpoint s3://orch-a/stores/stores/checkpoints/step-60" in run.stderr + run.stdout
    gcs = run.run_dir / "local_stores" / "local-c"
    assert any("step-60" in str(p) for p in gcs.rglob("*")), sorted(map(str, gcs.rglob("*")))[:20]
    assert "local-moto" not in (run.run_dir / "config.json").read_text()
