"""Notifications (orchestrator/notify/notifier.py): which events make one and what it says, event by
event; delivery to a real HTTP server on 127.0.0.1 and to a real command, in order and
bounded; and whole runs of the controller's loop over the scripted provider
(tests/support/fakecloud.py) that notify a server and a command of an incident, a failover and
the end, or meet a webhook that hangs or refuses, and end exactly as they would without
one, the failures journaled as ``notify_failed`` without the URL's secret. The targets'
secrets are in no file of the run but notify.secret (0600): a resumed controller reads
them back from there, and goes on without those a missing or damaged one cannot give.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.schema import NotifyConfig
from orchestrator.control.controller import Controller
from orchestrator.control.wiring import build_controller
from orchestrator.notify import notifier as notify
from orchestrator.notify.notifier import CommandTarget, DeliveryError, Notifier, WebhookTarget
from orchestrator.runstate import events as E
from orchestrator.runstate.rundir import NOTIFY_SECRET
from tests.support.fakecloud import HEARTBEATS, FakeCloud, Script
from tests.unit.orchestrator.notify.test_notifier import (
    RUN,
    TOKEN,
    _config_read_back,
    _fast,  # noqa: F401 (autouse: these tests run under it too)
    _running_in,
)

pytestmark = pytest.mark.integration


@dataclass
class Hook:
    """An HTTP server on 127.0.0.1 that records every request; ``mode`` says how it answers."""

    server: ThreadingHTTPServer
    mode: str = "ok"
    got: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str = f"/services/{TOKEN}?token={TOKEN}") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def notes(self) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in self.got]


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> Iterator[Hook]:
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    box: list[Hook] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            h = box[0]
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            h.got.append({"method": "POST", "path": self.path, "type": self.headers.get("Content-Type"), "body": body})
            if h.mode == "hang":
                h.release.wait(30)
                return
            if h.mode == "redirect":
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{h.port}/elsewhere")
            else:
                self.send_response(500 if h.mode == "error" else 204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    box.append(Hook(server))
    thread = threading.Thread(target=server.serve_forever, name="test-hook", daemon=True)
    thread.start()
    try:
        yield box[0]
    finally:
        box[0].release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def refusing_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections: bound, never listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


RECORDER = """\
import json, os, sys

data = sys.stdin.read()
names = ("ORCHESTRATOR_RUN_ID", "ORCHESTRATOR_EVENT", "ORCHESTRATOR_STATUS", "ORCHESTRATOR_JOB")
env = {k: os.environ.get(k) for k in names}
with open(sys.argv[1], "a") as fh:
    fh.write(json.dumps({"stdin": data, "env": env, "argv": sys.argv[2:]}) + "\\n")
sys.exit(int(os.environ.get("RECORDER_EXIT", "0")))
"""


@pytest.fixture
def recorder(tmp_path: Path) -> tuple[str, Path]:
    """(notify.command, the file it appends each call to): a real program writing its stdin and env."""
    script = tmp_path / "notify_recorder.py"
    script.write_text(RECORDER)
    out = tmp_path / "calls.jsonl"
    return f"{sys.executable} {script} {out} --token {TOKEN}", out


def _calls(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


NOTE = {"run_id": RUN, "kind": "incident", "job": "digits", "status": "RUNNING"}


def test_a_command_gets_the_json_on_stdin_and_the_essentials_in_its_environment(recorder: tuple[str, Path]) -> None:
    command, out = recorder
    target = CommandTarget(NotifyConfig(command=command).argv())
    assert target.endpoint == os.path.basename(sys.executable)
    target.deliver(NOTE, json.dumps(NOTE).encode(), 10.0)
    (call,) = _calls(out)
    assert json.loads(call["stdin"]) == NOTE and call["argv"] == ["--token", TOKEN]
    assert call["env"] == {
        "ORCHESTRATOR_RUN_ID": RUN,
        "ORCHESTRATOR_EVENT": "incident",
        "ORCHESTRATOR_STATUS": "RUNNING",
        "ORCHESTRATOR_JOB": "digits",
    }


def test_a_command_that_fails_hangs_or_is_missing_is_one_line_without_its_arguments(
    tmp_path: Path, recorder: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    command, _ = recorder
    monkeypatch.setenv("RECORDER_EXIT", "3")
    with pytest.raises(DeliveryError, match=r"^exited with status 3$"):
        CommandTarget(NotifyConfig(command=command).argv()).deliver(NOTE, b"{}", 10.0)
    with pytest.raises(DeliveryError, match=r"^cannot start no-such-program-zz: No such file"):
        CommandTarget(["no-such-program-zz", TOKEN]).deliver(NOTE, b"{}", 10.0)
    # It hangs, and so does what it started: both are gone at the deadline.
    pids = tmp_path / "pids"
    hang = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    with pytest.raises(DeliveryError, match=r"^still running after 1\.5s; killed$"):
        CommandTarget([sys.executable, "-c", hang, TOKEN]).deliver(NOTE, b"{}", 1.5)
    assert time.monotonic() - t0 < 5
    child = int(pids.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_a_webhook_gets_a_json_post_and_its_errors_never_show_the_url(hook: Hook, refusing_port: int) -> None:
    body = json.dumps(NOTE).encode()
    target = WebhookTarget(hook.url(), NotifyConfig(webhook=hook.url()).endpoint() or "")
    target.deliver(NOTE, body, 5.0)
    (req,) = hook.got
    assert (req["method"], req["path"], req["type"]) == ("POST", f"/services/{TOKEN}?token={TOKEN}", "application/json")
    assert json.loads(req["body"]) == NOTE
    assert target.endpoint == f"http://127.0.0.1:{hook.port}" and TOKEN not in repr(target)
    for mode, words in [("error", "HTTP 500"), ("redirect", "HTTP 302"), ("hang", "no answer within 0.5s")]:
        hook.mode = mode
        t0 = time.monotonic()
        with pytest.raises(DeliveryError) as err:
            target.deliver(NOTE, body, 0.5)
        assert time.monotonic() - t0 < 3
        assert str(err.value).startswith(words) and TOKEN not in str(err.value)
    # The redirect was not followed.
    assert not any(r["path"] == "/elsewhere" for r in hook.got)
    refused = f"http://127.0.0.1:{refusing_port}/services/{TOKEN}?token={TOKEN}"
    with pytest.raises(DeliveryError, match=r"^connection refused$"):
        WebhookTarget(refused, "x").deliver(NOTE, body, 5.0)


def test_offering_never_waits_for_a_hanging_target_and_the_end_waits_a_bounded_time(hook: Hook) -> None:
    hook.mode = "hang"
    failed: list[E.NotifyFailed] = []
    notifier = Notifier(NotifyConfig(webhook=hook.url(), timeout_s=0.5), RUN, "digits", failed=failed.append)
    view = _running_in("local-a")
    t0 = time.monotonic()
    for step in (10, 20, 30):
        notifier.offer(E.FailureDetected("runtime_lost", region="local-a", last_step=step, ts=1.0), view)
    notifier.offer(E.RunFinished(status="SUCCEEDED", final_step=60), view)
    assert time.monotonic() - t0 < 0.4  # under one delivery's 0.5 s: no offer waited for one
    notifier.close()
    # Two deliveries' time (0.5 s each) and a little: each notification is accounted for
    # once, timed out while the run went on or given up on at its end.
    assert time.monotonic() - t0 < 2.5
    assert sorted((f.target, f.notification) for f in failed) == [("webhook", "incident")] * 3 + [
        ("webhook", "succeeded")
    ]
    assert [f.error for f in failed[:2]] == ["no answer within 0.5s"] * 2
    assert {f.error.split(" (")[0] for f in failed[2:]} <= {
        "no answer within 0.5s",
        "no answer yet when the run ended",
        "not sent: the run ended before its turn came",
    }
    assert all(f.endpoint == f"http://127.0.0.1:{hook.port}" for f in failed)
    notifier.offer(E.RunFinished(status="SUCCEEDED"), view)  # after close: nothing, no error
    assert len(failed) == 4


def test_a_target_that_keeps_everyone_waiting_holds_a_bounded_backlog(
    hook: Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(notify, "QUEUE_MAX", 2)
    hook.mode = "hang"
    failed: list[E.NotifyFailed] = []
    notifier = Notifier(NotifyConfig(webhook=hook.url(), timeout_s=0.3), RUN, "digits", failed=failed.append)
    for _ in range(4):
        notifier.offer(E.FailureDetected("cluster_lost", region="a", ts=1.0), _running_in("a"))
    assert [f.error for f in failed] == ["not sent: 2 notifications already wait for this target"] * 2
    notifier.close()
    assert len(failed) == 4


def test_a_bug_in_building_a_notification_costs_that_notification_not_the_run(
    hook: Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> None:
        raise KeyError("regions")

    monkeypatch.setattr(notify, "notification", broken)
    failed: list[E.NotifyFailed] = []
    notifier = Notifier(NotifyConfig(webhook=hook.url()), RUN, "digits", failed=failed.append)
    notifier.offer(E.RunFinished(status="SUCCEEDED"), _running_in("a"))
    notifier.close()
    assert [(f.notification, f.error) for f in failed] == [("run_finished", "KeyError while building it")]
    assert hook.got == []


def _run(home: Path, cloud: FakeCloud, *overrides: str, progress: bool = False) -> tuple[Controller, dict[str, Any]]:
    cfg = compose(
        [
            f"home={home}",
            f"run_id={RUN}",
            f"progress={progress}",
            "job.steps=60",
            *HEARTBEATS,
            *overrides,
        ]
    )
    ctl = build_controller(cfg, cloud, RUN, out=io.StringIO())  # type: ignore[arg-type]
    return ctl, ctl.run()


def _failover_then_success() -> FakeCloud:
    return FakeCloud({"local-a": [Script(40, "cluster_lost")], "local-b": [Script()]})


def _files_with(root: Path, secret: str) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and secret in p.read_text("latin-1"))


def _outcome(ctl: Controller, result: dict[str, Any]) -> tuple[Any, ...]:
    return (
        result["status"],
        result["final_step"],
        [(a["region"], a["outcome"], a["restored_step"]) for a in ctl.record.attempts],
        [(i.kind, i.from_region, i.to_region, i.lost_steps) for i in ctl.record.incidents],
    )


def test_a_run_with_an_incident_a_failover_and_success_tells_a_server_and_a_command(
    tmp_path: Path, hook: Hook, recorder: tuple[str, Path]
) -> None:
    command, out = recorder
    ctl, result = _run(
        tmp_path / "home",
        _failover_then_success(),
        f"notify.webhook='{hook.url()}'",
        f"notify.command='{command}'",
    )
    assert result["status"] == "SUCCEEDED"
    notes = hook.notes()
    assert [n["kind"] for n in notes] == ["incident", "failover", "succeeded"]
    assert [json.loads(c["stdin"]) for c in _calls(out)] == notes
    assert [(c["env"]["ORCHESTRATOR_EVENT"], c["env"]["ORCHESTRATOR_STATUS"]) for c in _calls(out)] == [
        ("incident", "RUNNING"),
        ("failover", "RUNNING"),
        ("succeeded", "SUCCEEDED"),
    ]
    assert all(r["path"] == f"/services/{TOKEN}?token={TOKEN}" and r["type"] == "application/json" for r in hook.got)
    incident, failover, succeeded = notes
    assert {k: incident[k] for k in ("run_id", "job", "status", "regions", "step", "failure")} == {
        "run_id": RUN,
        "job": "digits",
        "status": "RUNNING",
        "regions": ["local-a"],
        "step": 40,
        "failure": "cluster_lost",
    }
    assert incident["reason"] and incident["rto_s"] is None
    (recorded,) = result["incidents"]
    assert failover["regions"] == ["local-a", "local-b"] and failover["restored_step"] == 40
    # The RTO result.json and the incident report give: from the failure to the first step in local-b.
    assert failover["rto_s"] == recorded["rto_s"] and failover["rto_s"] > 0
    assert (succeeded["regions"], succeeded["step"], succeeded["status"]) == (["local-b"], 60, "SUCCEEDED")
    assert not [e for e in ctl.journal.events() if e["type"] == "notify_failed"]
    # The journal's copy of the config names the webhook by scheme and host, the command by its program.
    (started,) = [e for e in ctl.journal.events() if e["type"] == "run_started"]
    assert started["config"]["notify"] == {
        "command": os.path.basename(sys.executable) + " ...",
        "webhook": f"http://127.0.0.1:{hook.port}",
        "timeout_s": 5.0,
    }
    # Only notify.secret (0600, for a resume) holds the token.
    assert _files_with(tmp_path / "home", TOKEN) == [f"runs/{RUN}/{NOTIFY_SECRET}"]


def test_a_run_that_fails_tells_of_each_incident_the_failover_and_the_failure(
    tmp_path: Path, hook: Hook, recorder: tuple[str, Path]
) -> None:
    command, out = recorder
    ctl, result = _run(
        tmp_path / "home",
        FakeCloud({"local-a": [Script(20, "cluster_lost")], "local-b": [Script(40, "cluster_lost")]}),
        "recovery.max_failovers=1",
        f"notify.webhook='{hook.url()}'",
        f"notify.command='{command}'",
    )
    assert result["status"] == "FAILED"
    notes = hook.notes()
    assert [(n["kind"], n["regions"]) for n in notes] == [
        ("incident", ["local-a"]),
        ("failover", ["local-a", "local-b"]),
        ("incident", ["local-b"]),
        ("failed", ["local-b"]),
    ]
    assert [json.loads(c["stdin"]) for c in _calls(out)] == notes
    failed = notes[-1]
    assert failed["status"] == "FAILED" and "recovery.max_failovers=1" in failed["reason"]
    assert failed["reason"] == ctl.record.reason
    assert not [e for e in ctl.journal.events() if e["type"] == "notify_failed"]


@pytest.mark.parametrize("trouble", ["hang", "refuse"])
def test_a_webhook_that_hangs_or_refuses_changes_nothing_of_the_run_and_is_journaled_without_its_secret(
    tmp_path: Path, hook: Hook, refusing_port: int, trouble: str
) -> None:
    plain_ctl, plain = _run(tmp_path / "plain", _failover_then_success())
    if trouble == "hang":
        hook.mode = "hang"
        url, timeout_s = hook.url(), 1.5
    else:
        url, timeout_s = f"http://127.0.0.1:{refusing_port}/services/{TOKEN}?token={TOKEN}", 5.0
    home = tmp_path / "home"
    t0 = time.monotonic()
    ctl, result = _run(home, _failover_then_success(), f"notify.webhook='{url}'", f"notify.timeout_s={timeout_s}")
    took = time.monotonic() - t0
    assert _outcome(ctl, result) == _outcome(plain_ctl, plain)
    events = ctl.journal.events()
    failed = [e for e in events if e["type"] == "notify_failed"]
    assert sorted(f["notification"] for f in failed) == ["failover", "incident", "succeeded"]
    endpoint = f"http://127.0.0.1:{hook.port if trouble == 'hang' else refusing_port}"
    assert all(f["target"] == "webhook" and f["endpoint"] == endpoint for f in failed)
    if trouble == "refuse":
        assert [f["error"] for f in failed] == ["connection refused"] * 3
    else:
        # Nothing waited for the server: the run ended long before two of its deadlines passed
        # (each notification before the end would have cost 1.5 s), and its end waited at most two.
        ts = {e["type"]: e["ts"] for e in events}
        assert ts["run_finished"] - ts["failure_detected"] < 2 * timeout_s
        assert took < 2 * timeout_s + 0.5 + 5
        assert {f["error"].split(" (")[0] for f in failed} <= {
            "no answer within 1.5s",
            "no answer yet when the run ended",
            "not sent: the run ended before its turn came",
        }
    assert _files_with(home, TOKEN) == [f"runs/{RUN}/{NOTIFY_SECRET}"]
    assert _files_with(home, "services") == [f"runs/{RUN}/{NOTIFY_SECRET}"]


def _interrupted(home: Path, cloud: FakeCloud, hook: Hook, *overrides: str, calls: Path | None = None) -> Controller:
    """A controller that started the run (config.json and notify.secret written as at a run's
    start), failed over from local-a, restarted in place in local-b, then died."""
    cfg = compose(
        [
            f"home={home}",
            f"run_id={RUN}",
            "progress=false",
            "job.steps=60",
            *HEARTBEATS,
            *overrides,
        ]
    )
    from orchestrator.control.controller import save_config

    ctl = build_controller(cfg, cloud, RUN, out=io.StringIO())  # type: ignore[arg-type]
    save_config(ctl.run_dir, cfg)
    ctl.emit(E.RunStarted(run_id=RUN, pid=1, candidates=tuple(ctl.candidates)))
    ctl._start_above_fences()
    assert ctl.step() is False  # local-a lost: failover to local-b
    assert ctl.step() is False  # local-b's driver lost: restart in place
    deadline = time.monotonic() + 10
    while (len(hook.got) < 3 or (calls is not None and len(_calls(calls)) < 3)) and time.monotonic() < deadline:
        time.sleep(0.02)
    # The controller dies here; a new one resumes the run from its journal.
    ctl.runner.close(ctl.generation)
    return ctl


def _cloud_for_resume() -> FakeCloud:
    return FakeCloud({"local-a": [Script(40, "cluster_lost")], "local-b": [Script(50, "runtime_lost"), Script()]})


def test_a_resumed_controller_tells_what_is_left_and_nothing_twice_to_the_targets_notify_secret_keeps(
    tmp_path: Path, hook: Hook, recorder: tuple[str, Path]
) -> None:
    command, out = recorder
    home = tmp_path / "home"
    cloud = _cloud_for_resume()
    _interrupted(home, cloud, hook, f"notify.webhook='{hook.url()}'", f"notify.command='{command}'", calls=out)
    # config.json names the targets, notify.secret holds them: the resumed controller reads
    # its config as action=resume does, and its targets back from notify.secret.
    cfg = _config_read_back(home)
    assert (cfg.notify.webhook, cfg.notify.command) == (
        f"notify.secret:http://127.0.0.1:{hook.port}",
        f"notify.secret:{sys.executable}",
    )
    printed = io.StringIO()
    resumed = build_controller(cfg, cloud, RUN, out=printed)  # type: ignore[arg-type]
    assert resumed.resume()["status"] == "SUCCEEDED"
    assert [(n["kind"], n["regions"], n["failure"]) for n in hook.notes()] == [
        ("incident", ["local-a"], "cluster_lost"),
        ("failover", ["local-a", "local-b"], "cluster_lost"),
        ("incident", ["local-b"], "runtime_lost"),
        ("succeeded", ["local-b"], None),
    ]
    # The resumed controller posted to the whole URL, and ran the command with its arguments.
    assert [r["path"] for r in hook.got] == [f"/services/{TOKEN}?token={TOKEN}"] * 4
    assert [c["argv"] for c in _calls(out)] == [["--token", TOKEN]] * 4
    assert [json.loads(c["stdin"])["kind"] for c in _calls(out)] == ["incident", "failover", "incident", "succeeded"]
    assert not [e for e in resumed.journal.events() if e["type"] in ("notify_off", "notify_failed")]
    assert printed.getvalue() == ""
    assert _files_with(home, TOKEN) == [f"runs/{RUN}/{NOTIFY_SECRET}"]


def test_the_token_is_in_no_file_but_notify_secret_nor_in_the_progress_output(
    tmp_path: Path, hook: Hook, refusing_port: int, recorder: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    command, out = recorder
    monkeypatch.setenv("RECORDER_EXIT", "3")  # the command fails: noted on the progress line
    home = tmp_path / "home"
    refused = f"http://127.0.0.1:{refusing_port}/services/{TOKEN}?token={TOKEN}"
    ctl, result = _run(
        home,
        _failover_then_success(),
        f"notify.webhook='{refused}'",
        f"notify.command='{command}'",
        progress=True,
    )
    assert result["status"] == "SUCCEEDED"
    assert len(_calls(out)) == 3  # the command got its arguments, whole
    run_dir = home / "runs" / RUN
    secret = run_dir / NOTIFY_SECRET
    assert _files_with(home, TOKEN) == [f"runs/{RUN}/{NOTIFY_SECRET}"]
    assert _files_with(home, "services") == [f"runs/{RUN}/{NOTIFY_SECRET}"]
    assert secret.stat().st_mode & 0o777 == 0o600
    assert json.loads(secret.read_text()) == {"version": 1, "run_id": RUN, "command": command, "webhook": refused}
    # config.json names each target by what may be shown of it, and reads back as it is.
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["notify"] == {
        "command": f"notify.secret:{sys.executable}",
        "webhook": f"notify.secret:http://127.0.0.1:{refusing_port}",
        "timeout_s": 5.0,
    }
    from orchestrator.config.saved import config_from_plain
    from orchestrator.wire.codec import to_plain

    assert to_plain(config_from_plain(saved)) == saved
    for name in ("config.json", "journal.jsonl", "result.json"):
        text = (run_dir / name).read_text()
        assert TOKEN not in text and "services" not in text and "--token" not in text, name
    # The progress output said what failed, by the webhook's host and the command's program.
    printed = ctl.progress.stream.getvalue()  # type: ignore[attr-defined]
    assert f"notify: webhook http://127.0.0.1:{refusing_port} failed (connection refused)" in printed
    assert f"notify: command {os.path.basename(sys.executable)} failed (exited with status 3)" in printed
    assert TOKEN not in printed and "services" not in printed and "--token" not in printed


def _damage(secret: Path, how: str) -> None:
    if how == "missing":
        secret.unlink()
    elif how == "garbage":
        secret.write_bytes(b'{"version": 1, "webh')
    elif how == "another-host":
        data = json.loads(secret.read_text())
        data["webhook"] = f"http://localhost:1/services/{TOKEN}"
        secret.write_text(json.dumps(data))
    else:
        raise AssertionError(how)


# What the resumed controller journals and says, per damage: each target it cannot have.
LOST = {
    "missing": [
        ("command", "no notify.secret in the run's folder"),
        ("webhook", "no notify.secret in the run's folder"),
    ],
    "garbage": [
        ("command", "notify.secret is damaged (not the JSON a run writes)"),
        ("webhook", "notify.secret is damaged (not the JSON a run writes)"),
    ],
    "another-host": [("webhook", "notify.secret's webhook is not the one config.json names")],
}


@pytest.mark.parametrize("how", list(LOST))
def test_a_resume_whose_notify_secret_is_missing_or_damaged_goes_on_without_those_targets_and_says_why(
    tmp_path: Path, hook: Hook, recorder: tuple[str, Path], how: str
) -> None:
    command, out = recorder
    home = tmp_path / "home"
    cloud = _cloud_for_resume()
    _interrupted(home, cloud, hook, f"notify.webhook='{hook.url()}'", f"notify.command='{command}'", calls=out)
    before_hook, before_calls = len(hook.got), len(_calls(out))
    assert (before_hook, before_calls) == (3, 3)
    _damage(home / "runs" / RUN / NOTIFY_SECRET, how)
    printed = io.StringIO()
    resumed = build_controller(_config_read_back(home), cloud, RUN, out=printed)  # type: ignore[arg-type]
    assert resumed.resume()["status"] == "SUCCEEDED"  # never the run's concern
    off = [e for e in resumed.journal.events() if e["type"] == "notify_off"]
    endpoints = {"command": sys.executable, "webhook": f"http://127.0.0.1:{hook.port}"}
    assert [(e["target"], e["reason"]) for e in off] == LOST[how]
    assert all(e["endpoint"] == endpoints[e["target"]] for e in off)
    # Journaled before the resume itself, and said in one line each.
    types = [e["type"] for e in resumed.journal.events()]
    assert types.index("notify_off") < types.index("run_resumed")
    assert printed.getvalue().splitlines() == [
        f"warning: run {RUN}: notify.{target} ({endpoints[target]}) is off: {reason}" for target, reason in LOST[how]
    ]
    # The targets that are off heard nothing more; the command, when notify.secret gave it, did.
    assert len(hook.got) == before_hook
    after = [json.loads(c["stdin"])["kind"] for c in _calls(out)[before_calls:]]
    assert after == (["succeeded"] if how == "another-host" else [])
    assert not [e for e in resumed.journal.events() if e["type"] == "notify_failed"]
    assert TOKEN not in printed.getvalue()
    assert TOKEN not in (home / "runs" / RUN / "journal.jsonl").read_text()


def test_a_resume_refuses_a_notify_secret_others_can_read_as_it_refuses_such_a_run_secret(
    tmp_path: Path, hook: Hook
) -> None:
    from orchestrator.control.controller import save_config
    from orchestrator.notify.secret import NotifySecretError

    home = tmp_path / "home"
    cfg = compose([f"home={home}", f"run_id={RUN}", "progress=false", f"notify.webhook='{hook.url()}'"])
    first = build_controller(cfg, FakeCloud({}), RUN, out=io.StringIO())  # type: ignore[arg-type]
    save_config(first.run_dir, cfg)
    secret = home / "runs" / RUN / NOTIFY_SECRET
    secret.chmod(0o644)
    with pytest.raises(NotifySecretError) as err:
        build_controller(_config_read_back(home), FakeCloud({}), RUN, out=io.StringIO())  # type: ignore[arg-type]
    assert str(err.value) == f"{secret}: readable by others (mode 644); chmod 600 it"
    secret.chmod(0o600)
    again = build_controller(_config_read_back(home), FakeCloud({}), RUN, out=io.StringIO())  # type: ignore[arg-type]
    assert again.notify.webhook == hook.url() and again.notify_lost == []


def test_a_webhook_taken_from_the_environment_is_told_and_kept_like_one_given_whole(
    tmp_path: Path, hook: Hook, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_TEST_HOOK_URL", hook.url())
    home = tmp_path / "home"
    ctl, result = _run(home, _failover_then_success(), "notify.webhook=env:ORCH_TEST_HOOK_URL")
    assert result["status"] == "SUCCEEDED"
    assert [n["kind"] for n in hook.notes()] == ["incident", "failover", "succeeded"]
    assert all(r["path"] == f"/services/{TOKEN}?token={TOKEN}" for r in hook.got)
    assert _files_with(home, TOKEN) == [f"runs/{RUN}/{NOTIFY_SECRET}"]
    # What the run keeps is the URL read at its start: a resume needs no environment variable.
    monkeypatch.delenv("ORCH_TEST_HOOK_URL")
    assert _config_read_back(home).notify.webhook == f"notify.secret:http://127.0.0.1:{hook.port}"
    again = build_controller(_config_read_back(home), FakeCloud({}), RUN, out=io.StringIO())  # type: ignore[arg-type]
    assert again.notify.webhook == hook.url()
    (started,) = [e for e in ctl.journal.events() if e["type"] == "run_started"]
    assert started["config"]["notify"]["webhook"] == f"http://127.0.0.1:{hook.port}"
