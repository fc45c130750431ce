"""Notifications: a run's incidents, failovers and end, told to a command and a webhook.

The controller hands every event it journals to ``Notifier.offer``. ``notification``
(pure) says whether the event is one a user hears of and builds its JSON from the
event and the run's view after it; a sender per target delivers in the background, in
order, each delivery bounded by ``notify.timeout_s``. A delivery that fails is journaled
as ``notify_failed`` (the target, the notification, one line of error, the webhook's
scheme and host or the command's program) and the run goes on: a notifier never
blocks, slows or fails a run.

What a user hears of:

- ``incident``: a failure detected (``failure_detected``), an attempt whose launch
  failed (``provision_failed``), or a failure recovered in place that neither announces
  (an ``incident`` of kind ``worker_lost`` or ``controller_lost``, once it is recorded);
- ``failover``: the incident of a move to another region closed (an ``incident`` whose
  ``to_region`` is another region): at the first step there, with its RTO, or at that
  attempt's end if it never trained (``rto_s`` null);
- ``succeeded`` / ``failed``: the run's end (``run_finished``, after result.json).

Delivery is at most once: a controller that dies with a notification queued loses it,
and a resumed one does not send again what the journal already held.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol
from urllib.parse import urlsplit

from orchestrator.config.schema import NotifyConfig, env_name
from orchestrator.runstate.events import (
    Event,
    FailureDetected,
    IncidentRecorded,
    NotifyFailed,
    ProvisionFailed,
    RunFinished,
    type_of,
)
from orchestrator.runstate.state import RunView
from providers.base import PROVISION_FAILURE, ProvisionErrorKind

# Notifications waiting for a slow target, each: beyond this, new ones are dropped (and
# journaled), so a target that hangs through a long run holds no growing backlog.
QUEUE_MAX = 16
# A reason or an error, cut to one line of at most this many characters.
LINE_MAX = 300
NOT_SENT = "not sent: the run ended before its turn came"
# Of a webhook's answer, read at most this much (and ignored): its status is what counts.
ANSWER_MAX = 64 * 1024


class NotificationKind(StrEnum):
    incident = "incident"
    failover = "failover"
    succeeded = "succeeded"
    failed = "failed"
    interrupted = "interrupted"  # Ctrl-C or SIGTERM: waits for action=resume
    cancelled = "cancelled"  # action=cancel: ended for good, checkpoints kept


# Incidents that no failure_detected or provision_failed announced: heard of when recorded.
_IN_PLACE = {
    "worker_lost": "a worker was lost; Ray Train restarted the worker group in place",
    "controller_lost": "the controller died; a resumed controller took the run over",
}


def notification(event: Event, view: RunView, run_id: str, job: str) -> dict[str, Any] | None:
    """The notification ``event`` makes, given the run's ``view`` after it; None if it makes none.

    Every notification has the same keys (null where they do not apply)."""
    if isinstance(event, FailureDetected):
        return _note(
            NotificationKind.incident,
            event,
            view,
            run_id,
            job,
            regions=_one(event.region),
            step=event.last_step,
            failure=event.kind,
            reason=event.detail,
        )
    if isinstance(event, ProvisionFailed) and event.purpose == "attempt":
        return _note(
            NotificationKind.incident,
            event,
            view,
            run_id,
            job,
            regions=[event.region],
            failure=_provision_failure(event.kind),
            reason=event.error,
        )
    if isinstance(event, IncidentRecorded):
        moved = event.to_region is not None and event.to_region != event.from_region
        if not moved and event.kind not in _IN_PLACE:
            return None  # a restart in place: its failure_detected was the news
        return _note(
            NotificationKind.failover if moved else NotificationKind.incident,
            event,
            view,
            run_id,
            job,
            regions=[event.from_region, event.to_region] if moved else [event.from_region],
            failure=event.kind,
            reason=None if moved else _IN_PLACE[event.kind],
            rto_s=event.rto_s,
            restored_step=event.restored_step,
            lost_steps=event.lost_steps,
        )
    if isinstance(event, RunFinished):
        status = event.status or view.status
        succeeded = status == "SUCCEEDED"
        return _note(
            _END_KINDS.get(str(status), NotificationKind.failed),
            event,
            view,
            run_id,
            job,
            status=status,
            regions=_one(view.current_region),
            step=event.final_step,
            reason=None if succeeded else view.reason,
        )
    return None


_END_KINDS = {
    "SUCCEEDED": NotificationKind.succeeded,
    "FAILED": NotificationKind.failed,
    "INTERRUPTED": NotificationKind.interrupted,
    "CANCELLED": NotificationKind.cancelled,
}


def _note(
    kind: NotificationKind,
    event: Event,
    view: RunView,
    run_id: str,
    job: str,
    *,
    regions: list[str],
    status: str | None = None,
    step: int | None = None,
    failure: str | None = None,
    reason: str | None = None,
    rto_s: float | None = None,
    restored_step: int | None = None,
    lost_steps: int | None = None,
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "kind": str(kind),
        "job": job,
        "status": status or view.status,
        "regions": regions,
        "step": view.last_step if step is None else step,
        "rto_s": rto_s,
        "failure": failure,
        "reason": None if reason is None else one_line(reason),
        "restored_step": restored_step,
        "lost_steps": lost_steps,
        "time": datetime.fromtimestamp(event.ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        # The journal line's ts: the event this notification comes from.
        "ts": event.ts,
    }


def _one(region: str | None) -> list[str]:
    return [] if region is None else [region]


def _provision_failure(kind: str | None) -> str | None:
    """A launch's error kind as the failure the policy met (provisioning's own words differ)."""
    if kind in set(ProvisionErrorKind):
        return str(PROVISION_FAILURE[ProvisionErrorKind(kind)])
    return kind


def one_line(text: str) -> str:
    """The first line of ``text`` with anything in it, cut to LINE_MAX characters."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= LINE_MAX else line[: LINE_MAX - 3] + "..."


# --- delivery --------------------------------------------------------------------------------------


class DeliveryError(Exception):
    """A delivery that did not succeed; its message is one line with no secret in it."""


class Target(Protocol):
    """Where notifications go: ``name`` (command | webhook) and ``endpoint`` are journaled."""

    name: str
    endpoint: str

    def deliver(self, note: dict[str, Any], body: bytes, timeout_s: float) -> None:
        """Deliver ``body`` (``note`` as JSON) within ``timeout_s``, or raise DeliveryError."""
        ...


class CommandTarget:
    """A program run once per notification: the JSON on stdin, the essentials in its environment.

    Its own session, so a timeout kills what it started too; its output goes nowhere (it
    would garble the progress line, and a script may print what it was given)."""

    name = "command"

    def __init__(self, argv: list[str]) -> None:
        self.argv = list(argv)
        # The program alone: its arguments may hold a token.
        self.endpoint = os.path.basename(self.argv[0])

    def deliver(self, note: dict[str, Any], body: bytes, timeout_s: float) -> None:
        env = {
            **os.environ,
            "ORCHESTRATOR_RUN_ID": str(note["run_id"]),
            "ORCHESTRATOR_EVENT": str(note["kind"]),
            "ORCHESTRATOR_STATUS": str(note["status"]),
            "ORCHESTRATOR_JOB": str(note["job"]),
        }
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise DeliveryError(f"cannot start {self.endpoint}: {exc.strerror or type(exc).__name__}") from None
        try:
            proc.communicate(body, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_session(proc)
            raise DeliveryError(f"still running after {timeout_s:g}s; killed") from None
        code = proc.returncode
        if code != 0:
            raise DeliveryError(f"killed by signal {-code}" if code < 0 else f"exited with status {code}")


def _kill_session(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


class WebhookTarget:
    """An HTTP(S) POST of the JSON. Only a 2xx answer counts; a redirect is not followed (it
    would send the run's news where the configured URL does not say)."""

    name = "webhook"

    def __init__(self, url: str, endpoint: str) -> None:
        self._url = url
        self.endpoint = endpoint

    def __repr__(self) -> str:  # never the URL, wherever a target is printed
        return f"WebhookTarget({self.endpoint})"

    def deliver(self, note: dict[str, Any], body: bytes, timeout_s: float) -> None:
        request = urllib.request.Request(
            self._url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": "orchestrator-notify"},
        )

        def post() -> None:
            # Built per delivery: the proxy settings are the environment's at the time.
            with urllib.request.build_opener(_NoRedirect).open(request, timeout=timeout_s) as answer:
                answer.read(ANSWER_MAX)

        # The socket's timeout bounds each wait, not the whole exchange (a server may trickle
        # its answer): the thread bounds that.
        outcome: list[BaseException | None] = []
        worker = threading.Thread(target=lambda: outcome.append(_caught(post)), name="notify-post", daemon=True)
        worker.start()
        worker.join(timeout_s)
        if not outcome:
            raise DeliveryError(f"no answer within {timeout_s:g}s")
        if outcome[0] is not None:
            raise DeliveryError(self._error(outcome[0], timeout_s))

    def _error(self, exc: BaseException, timeout_s: float) -> str:
        if isinstance(exc, urllib.error.HTTPError):
            text = f"HTTP {exc.code} {exc.reason}"
            if 300 <= exc.code < 400:
                text += " (redirects are not followed)"
        elif isinstance(exc, urllib.error.URLError):
            reason = exc.reason
            if isinstance(reason, ConnectionRefusedError):
                text = "connection refused"
            elif isinstance(reason, TimeoutError):
                text = f"no answer within {timeout_s:g}s"
            else:
                text = str(reason)
        elif isinstance(exc, TimeoutError):
            text = f"no answer within {timeout_s:g}s"
        elif isinstance(exc, ConnectionRefusedError):
            text = "connection refused"
        else:
            text = f"{type(exc).__name__}: {exc}"
        return one_line(_without_url(text, self._url))


def _caught(fn: Callable[[], None]) -> BaseException | None:
    try:
        fn()
    except BaseException as exc:
        return exc
    return None


def _without_url(text: str, url: str) -> str:
    """``text`` with the URL, its path and its query taken out: a token may be in any of them."""
    parts = urlsplit(url)
    for part in sorted({url, parts.path, parts.query, parts.fragment}, key=len, reverse=True):
        if len(part) > 1:
            text = text.replace(part, "...")
    return text


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


class _Sender:
    """One target's deliveries, in order, on a thread of its own."""

    def __init__(self, target: Target, timeout_s: float, failed: Callable[[NotifyFailed], object]) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self._failed = failed
        self._queue: queue.SimpleQueue[tuple[dict[str, Any], bytes] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._backlog = 0  # queued and in flight
        self._current: dict[str, Any] | None = None
        self._abandoned = False
        self.thread = threading.Thread(target=self._loop, name=f"notify-{target.name}", daemon=True)
        self.thread.start()

    def put(self, note: dict[str, Any], body: bytes) -> None:
        with self._lock:
            full = self._backlog >= QUEUE_MAX
            if not full:
                self._backlog += 1
        if full:
            self._fail(note, f"not sent: {QUEUE_MAX} notifications already wait for this target")
            return
        self._queue.put((note, body))

    def _loop(self) -> None:
        while (item := self._queue.get()) is not None:
            note, body = item
            with self._lock:
                # Taken just as the run's end gave up waiting: abandon() did not see it.
                late = self._abandoned
                self._current = None if late else note
            if late:
                self._fail(note, NOT_SENT)
                return
            error = None
            try:
                self.target.deliver(note, body, self.timeout_s)
            except DeliveryError as exc:
                error = str(exc)
            except Exception as exc:  # a bug in a target must not end the thread, nor reach the run
                error = one_line(f"{type(exc).__name__} while delivering")
            with self._lock:
                self._current = None
                self._backlog -= 1
                if self._abandoned:
                    return  # the run ended without it: close() said so already
            if error is not None:
                self._fail(note, error)

    def _fail(self, note: dict[str, Any], error: str) -> None:
        try:
            self._failed(
                NotifyFailed(
                    target=self.target.name, notification=str(note["kind"]), error=error, endpoint=self.target.endpoint
                )
            )
        except Exception:
            pass  # the journal itself failing: nothing more to say, and not the run's concern

    def failed_to_build(self, event_type: str, error: str) -> None:
        self._fail({"kind": event_type}, error)

    def stop(self) -> None:
        self._queue.put(None)

    def abandon(self) -> None:
        """The run's end waited long enough: what is still here is journaled as not sent."""
        with self._lock:
            self._abandoned = True
            current = self._current
        if current is not None:
            self._fail(current, f"no answer yet when the run ended ({self.timeout_s:g}s deadline)")
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self._fail(item[0], NOT_SENT)
        self._queue.put(None)  # the stop it drained: the thread ends once its delivery does


class Notifier:
    """The run's notifications: ``offer`` each journaled event, ``close`` at the run's end."""

    def __init__(
        self,
        cfg: NotifyConfig,
        run_id: str,
        job: str,
        failed: Callable[[NotifyFailed], object],
    ) -> None:
        self.run_id = run_id
        self.job = job
        self.timeout_s = cfg.timeout_s
        if cfg.kept() or env_name(cfg.webhook) is not None:
            # A name, not a target: never run notify.secret:PROGRAM or post to env:VARNAME.
            raise ValueError("notify targets are taken from notify.secret and the environment before a Notifier")
        targets: list[Target] = []
        if cfg.command is not None:
            targets.append(CommandTarget(cfg.argv()))
        if cfg.webhook is not None:
            targets.append(WebhookTarget(cfg.webhook, cfg.endpoint() or ""))
        self._senders = [_Sender(t, cfg.timeout_s, failed) for t in targets]
        self._closed = False

    def offer(self, event: Event, view: RunView) -> None:
        """Queue the notification ``event`` makes, if any. Never blocks and never raises:
        the controller calls it as it journals, under the run's state lock."""
        if not self._senders or self._closed or isinstance(event, NotifyFailed):
            return
        try:
            note = notification(event, view, self.run_id, self.job)
            if note is None:
                return
            body = json.dumps(note).encode()
        except Exception as exc:  # a bug here must cost a notification, not the run
            for sender in self._senders:
                sender.failed_to_build(type_of(event), one_line(f"{type(exc).__name__} while building it"))
            return
        for sender in self._senders:
            sender.put(note, body)

    def close(self) -> None:
        """Wait for the notifications still queued: at most two deliveries' time (the one in
        flight as the run ended, then the end's own); what is left then is journaled as not sent."""
        if self._closed:
            return
        self._closed = True
        for sender in self._senders:
            sender.stop()
        deadline = time.monotonic() + 2 * self.timeout_s + 0.5
        try:
            for sender in self._senders:
                sender.thread.join(max(0.0, deadline - time.monotonic()))
        except KeyboardInterrupt:
            pass  # Ctrl-C while the finished run waits: stop waiting, say what was not sent
        for sender in self._senders:
            if sender.thread.is_alive():
                sender.abandon()


def shown(cfg: NotifyConfig) -> dict[str, Any]:
    """notify.* as the journal may hold it: the webhook's scheme and host, the command's program."""
    argv = cfg.argv()
    return {
        "command": None if not argv else os.path.basename(argv[0]) + (" ..." if len(argv) > 1 else ""),
        "webhook": cfg.endpoint(),
        "timeout_s": cfg.timeout_s,
    }
