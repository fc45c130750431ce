"""A real MLflow tracking server on 127.0.0.1 (its own session: a sqlite database and an
artifact folder under the test's tmp folder, ended by its process group's id), and W&B's
offline run files read back with W&B's own reader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from providers.local.provider import free_port


@dataclass
class MlflowServer:
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the server and its uvicorn worker
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)


def start_mlflow(folder: Path, timeout_s: float = 90.0) -> MlflowServer:
    """``mlflow server`` with a sqlite backend and artifacts served from ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # no job runner (huey) here
    log = open(folder / "server.log", "wb")  # the server's own: closed as it ends
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow.db'}",
            "--artifacts-destination",
            str(folder / "artifacts"),
        ],
        cwd=folder,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = MlflowServer(port, proc)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"mlflow server exited with {proc.returncode}: {(folder / 'server.log').read_text()[-2000:]}"
            )
        try:
            with urllib.request.urlopen(f"{server.uri}/health", timeout=1) as r:
                if r.status == 200:
                    return server
        except OSError:
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"mlflow server not up after {timeout_s:g} s")


def wandb_records(run_dir: Path) -> list[Any]:
    """Every record of the run's W&B offline files (``tracking/wandb/offline-run-*/run-*.wandb``),
    in the order written, as W&B's own protobuf records."""
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    out = []
    for path in sorted((run_dir / "tracking" / "wandb").glob("offline-run-*/run-*.wandb")):
        store = datastore.DataStore()
        store.open_for_scan(str(path))
        while True:
            data = store.scan_data()
            if data is None:
                break
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            out.append(record)
    return out
