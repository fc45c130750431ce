"""Preemption notices from outside the run: the cloud's instance metadata, and Ray's drain.

A spot VM is told before it is reclaimed: AWS answers ``spot/instance-action`` (IMDSv2)
about two minutes ahead, GCP's metadata server turns ``instance/preempted`` TRUE about
30 s ahead. Ray Core marks a node *draining* (with a deadline) when it is asked to
give it up (``ray drain-node``, an autoscaler or a platform that sees the cloud's
notice). One worker per node watches both for its own node (``NodeWatch``) and hands
a notice to the existing path: the control channel's ``preempt.json``, which rank 0's
watch reads, then every rank agrees on a step, checkpoints it and stops, exactly as
after the driver's SIGTERM relay.

What the services answer is read strictly (``parse_*``): a malformed answer is no
notice, and is reported once, in one line. An endpoint that refuses, times out or is
not there is no notice either: a node off that cloud (or a hung service) never
stops a run. Requests go straight to the service (no proxy, no redirect) with short
timeouts, from the watch's own thread, so training never waits for them.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlsplit

POLL_S = 1.0
# Each request's connect and each read; a hung service costs a poll this long, no more.
TIMEOUT_S = 1.0
MAX_BODY = 4096
AWS_URL = "http://169.254.169.254"
# metadata.google.internal's address: no DNS look-up, which no timeout bounds, off GCP.
GCP_URL = "http://169.254.169.254"
AWS_TOKEN_PATH = "/latest/api/token"
AWS_NOTICE_PATH = "/latest/meta-data/spot/instance-action"
GCP_NOTICE_PATH = "/computeMetadata/v1/instance/preempted"
AWS_TOKEN_TTL_S = 21600  # the longest IMDSv2 grants
AWS_ACTIONS = ("terminate", "stop", "hibernate")
_AWS_TIME = "%Y-%m-%dT%H:%M:%SZ"
# Reports of malformed answers per watch: one per distinct reason, this many at most.
MAX_INVALID = 20


class Malformed(ValueError):
    """An answer that is not what the service documents; the message is one line that
    never quotes the answer."""


@dataclass(frozen=True)
class Notice:
    """A node is about to go: from where, what the service said, and by when (UTC, ISO 8601)."""

    source: str  # aws | gcp | ray
    action: str  # aws: terminate | stop | hibernate; gcp: preempted; ray: drain
    deadline: str | None = None


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes


# --- what the services answer ------------------------------------------------------------------
def parse_aws_token(answer: Answer) -> str:
    if answer.status != 200:
        raise Malformed(f"aws: the token request answered HTTP {answer.status}")
    token = _text(answer.body, "aws: the token")
    if not token or len(token) > 1024 or not token.isprintable() or " " in token:
        raise Malformed("aws: the token is not one printable word")
    return token


def parse_aws(answer: Answer) -> Notice | None:
    """``spot/instance-action``: 404 is no notice; 200 is {"action", "time"}."""
    if answer.status == 404:
        return None
    if answer.status != 200:
        raise Malformed(f"aws: spot/instance-action answered HTTP {answer.status}")
    text = _text(answer.body, "aws: spot/instance-action")
    try:
        obj = json.loads(text)
    except ValueError:
        raise Malformed("aws: spot/instance-action is not JSON") from None
    if not isinstance(obj, dict):
        raise Malformed("aws: spot/instance-action is not a JSON object")
    action, when = obj.get("action"), obj.get("time")
    if action not in AWS_ACTIONS:
        raise Malformed(f"aws: spot/instance-action's action is not one of {', '.join(AWS_ACTIONS)}")
    if not isinstance(when, str):
        raise Malformed("aws: spot/instance-action has no time")
    try:
        deadline = datetime.strptime(when, _AWS_TIME).replace(tzinfo=UTC)
    except ValueError:
        raise Malformed("aws: spot/instance-action's time is not YYYY-MM-DDThh:mm:ssZ") from None
    return Notice("aws", str(action), deadline.isoformat())


def parse_gcp(answer: Answer) -> Notice | None:
    """``instance/preempted``: FALSE or TRUE, from a server that says it is Google's."""
    if answer.status != 200:
        raise Malformed(f"gcp: instance/preempted answered HTTP {answer.status}")
    # What Google's own clients check: anything else on that address is not the metadata server.
    if answer.headers.get("metadata-flavor") != "Google":
        raise Malformed("gcp: instance/preempted came without the header Metadata-Flavor: Google")
    text = _text(answer.body, "gcp: instance/preempted").strip()
    if text == "FALSE":
        return None
    if text == "TRUE":
        return Notice("gcp", "preempted")
    raise Malformed("gcp: instance/preempted is neither TRUE nor FALSE")


def parse_drain(drained: Any, node_id: str) -> Notice | None:
    """Ray Core's draining nodes, ``{node_id_hex: deadline_ms}`` (0: no deadline)."""
    if not isinstance(drained, dict):
        raise Malformed("ray: the draining nodes are not a mapping")
    if node_id not in drained:
        return None
    ms = drained[node_id]
    if isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms < 2**53:
        raise Malformed("ray: this node's drain deadline is not milliseconds since the epoch")
    deadline = datetime.fromtimestamp(ms / 1000, UTC).isoformat() if ms else None
    return Notice("ray", "drain", deadline)


def _text(body: bytes, what: str) -> str:
    if len(body) > MAX_BODY:
        raise Malformed(f"{what} is longer than {MAX_BODY} bytes")
    try:
        return body.decode("ascii")
    except UnicodeDecodeError:
        raise Malformed(f"{what} is not ASCII text") from None


# --- asking ------------------------------------------------------------------------------------
class Source(Protocol):
    name: str

    def check(self) -> Notice | None:
        """A notice, None, or Malformed; OSError when the service cannot be reached."""
        ...


def request(base: str, method: str, path: str, headers: dict[str, str], timeout_s: float = TIMEOUT_S) -> Answer:
    """One plain-http request to the metadata service: no proxy (the environment's would
    see the instance's token), no redirect, at most MAX_BODY + 1 bytes read. OSError
    (refused, timed out, reset) when there is no answer."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port or 80, timeout=timeout_s)
    try:
        conn.request(method, parts.path.rstrip("/") + path, headers=headers)
        resp = conn.getresponse()
        body = resp.read(MAX_BODY + 1)
        return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, body)
    except http.client.HTTPException as exc:  # not HTTP at all: as good as no answer
        raise OSError(f"not an HTTP answer ({type(exc).__name__})") from None
    finally:
        conn.close()


class AwsMetadata:
    """IMDSv2: a session token (PUT, kept until it expires or is refused), then the
    notice (GET with the token)."""

    name = "aws"

    def __init__(self, base: str = "", timeout_s: float = TIMEOUT_S) -> None:
        self.base = base or AWS_URL
        self.timeout_s = timeout_s
        self._token: str | None = None

    def check(self) -> Notice | None:
        if self._token is None:
            ttl = {"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_S)}
            self._token = parse_aws_token(request(self.base, "PUT", AWS_TOKEN_PATH, ttl, self.timeout_s))
        answer = request(self.base, "GET", AWS_NOTICE_PATH, {"X-aws-ec2-metadata-token": self._token}, self.timeout_s)
        if answer.status == 401:
            self._token = None  # expired: a new one on the next poll
            return None
        return parse_aws(answer)


class GcpMetadata:
    name = "gcp"

    def __init__(self, base: str = "", timeout_s: float = TIMEOUT_S) -> None:
        self.base = base or GCP_URL
        self.timeout_s = timeout_s

    def check(self) -> Notice | None:
        return parse_gcp(request(self.base, "GET", GCP_NOTICE_PATH, {"Metadata-Flavor": "Google"}, self.timeout_s))


class RayDrain:
    """Ray Core's drain of this node: what Ray Train's own preemption watcher reads (it is
    off here: it restarts the worker group in place rather than checkpoint and leave)."""

    name = "ray"

    def __init__(self, node_id: str, draining: Callable[[], Any]) -> None:
        self.node_id = node_id
        self.draining = draining

    def check(self) -> Notice | None:
        try:
            drained = self.draining()
        except Exception as exc:
            # A GCS that does not answer now is no notice; told once per kind of failure.
            raise Malformed(f"ray: cannot read the draining nodes ({type(exc).__name__})") from None
        return parse_drain(drained, self.node_id)


def metadata_source(source: str, url: str) -> Source | None:
    """The spec's preemption_notice as a source to poll (None: the region watches none)."""
    if source == "aws":
        return AwsMetadata(url)
    if source == "gcp":
        return GcpMetadata(url)
    return None


def ray_drain() -> RayDrain | None:
    """This node's drain in Ray Core, inside a Ray worker; None where Ray offers no such read."""
    ray = sys.modules.get("ray")  # a Ray worker has it; elsewhere there is no node to drain
    if ray is None or not ray.is_initialized():  # Ray Train's local mode: one process, no cluster
        return None
    state = getattr(getattr(ray, "_private", None), "state", None)
    draining = getattr(getattr(state, "state", None), "get_draining_nodes", None)
    try:
        node_id = ray.get_runtime_context().get_node_id()
    except Exception:  # no node to name: nothing to watch, and nothing to stop the worker for
        return None
    return None if draining is None else RayDrain(node_id, draining)


# --- watching ----------------------------------------------------------------------------------
class NodeWatch:
    """Polls ``sources`` every ``poll_s`` until one gives a notice (``on_notice``, once) or
    ``stop`` is set. A malformed answer goes to ``on_invalid`` once per reason."""

    def __init__(
        self,
        sources: list[Source],
        on_notice: Callable[[Notice], None],
        on_invalid: Callable[[str], None],
        stop: threading.Event,
        poll_s: float = POLL_S,
    ) -> None:
        self.sources = sources
        self.on_notice = on_notice
        self.on_invalid = on_invalid
        self.stop = stop
        self.poll_s = poll_s
        self._reported: set[str] = set()

    def poll(self) -> Notice | None:
        """One round over the sources: the first notice, or None."""
        for source in self.sources:
            try:
                notice = source.check()
            except Malformed as exc:
                self._invalid(str(exc))
                continue
            except OSError:
                continue  # no answer: not on that cloud, or the service is down; no notice
            if notice is not None:
                return notice
        return None

    def run(self) -> None:
        while not self.stop.is_set():
            notice = self.poll()
            if notice is not None:
                try:
                    self.on_notice(notice)
                    return
                except Exception:
                    pass  # not handed on (the control channel failed): the service says it again next poll
            self.stop.wait(self.poll_s)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="node-notice-watch", daemon=True)
        thread.start()
        return thread

    def _invalid(self, reason: str) -> None:
        if reason in self._reported or len(self._reported) >= MAX_INVALID:
            return
        self._reported.add(reason)
        self.on_invalid(reason)
