"""The ranks' logs: their names, the cap of a kept copy, the tar stream a node's files
travel in (and what it refuses), a worker's descriptors pointed at its rank's file, the
providers' copies before teardown (a lost cluster's said, never raised), and
``action=logs``: which attempt and rank, what each missing one says, following a run.

The real thing (a workload's print in a rank's log after its cluster is gone) is
tests/chaos/test_user_workload.py's."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

import orchestrator.control.watch as watch
from orchestrator.commands.logs import Follow, follow, read_facts, show
from orchestrator.config.schema import Action, Config
from orchestrator.config.validate import validate
from orchestrator.control.cleanup import tear_down
from orchestrator.errors import ConfigError
from orchestrator.runstate.events import AttemptEnded, AttemptStarted, LogsKept, Provisioned, RunStarted, Teardown
from orchestrator.runstate.journal import Journal
from orchestrator.wire.logfiles import KeptLogs
from providers.base import ClusterHandle
from providers.local.provider import LocalProvider
from providers.skypilot.ssh import remote, ssh_argv
from tests.support.fakecloud import HEARTBEATS, FakeCloud, Script

pytestmark = pytest.mark.unit


# --- names and the cap ------------------------------------------------------------------------


# --- the stream from a node --------------------------------------------------------------------


# --- a worker's output -------------------------------------------------------------------------


# --- the providers' copies before teardown ------------------------------------------------------


def _cluster(tmp_path: Path, **info: Any) -> ClusterHandle:
    return ClusterHandle("r-local-a-g1", "local-a", "local", "127.0.0.1:1", dict(info))


def test_the_local_provider_keeps_the_clusters_rank_files(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "rank-0.log").write_text("out\n")
    provider = LocalProvider()
    kept = provider.keep_logs(_cluster(tmp_path, log_dir=str(tmp_path / "logs")), str(tmp_path / "g1"))
    assert kept.ranks == (0,) and (tmp_path / "g1" / "rank-0.log").read_text() == "out\n"
    assert "older version" in str(provider.keep_logs(_cluster(tmp_path), str(tmp_path / "g1")).error)


class _Provider:
    name = "p"
    capabilities: frozenset[Any] = frozenset()

    def __init__(self, keep: Any) -> None:
        self.down: list[str] = []
        self.keep_logs = keep

    def teardown(self, cluster: ClusterHandle) -> None:
        self.down.append(cluster.name)


def test_a_failing_copy_is_journaled_and_the_cluster_still_goes(tmp_path: Path) -> None:
    def boom(cluster: ClusterHandle, dest: str) -> KeptLogs:
        raise RuntimeError("disk gone")

    def nothing(cluster: ClusterHandle, dest: str) -> None:
        return None

    cases = ((_Provider(boom), "RuntimeError: disk gone"), (_Provider(nothing), "provider p kept no logs"))
    for provider, error in cases:
        events: list[Any] = []
        tear_down(provider, events.append, _cluster(tmp_path), logs_to=str(tmp_path / "g1"), generation=1)  # type: ignore[arg-type]
        assert [type(e) for e in events] == [LogsKept, Teardown]
        assert (events[0].generation, events[0].error, events[0].ranks) == (1, error, ())
        assert provider.down == ["r-local-a-g1"]
    events = []
    tear_down(_Provider(nothing), events.append, _cluster(tmp_path))  # type: ignore[arg-type]
    assert [type(e) for e in events] == [Teardown], "no attempt folder, no copy"


def test_skypilot_reaches_node_i_by_its_worker_host_or_its_slurm_rank() -> None:
    aws = ClusterHandle("c", "r", "skypilot", "", {"sky_cluster": "c-1", "infra": "aws/us-east-1"})
    assert ssh_argv(aws, "true", node=2, connect_timeout_s=10)[-2:] == ["c-1-worker2", "bash --login -c true"]
    assert "ConnectTimeout=10" in ssh_argv(aws, "true", connect_timeout_s=10)
    assert ssh_argv(aws, "true")[-2] == "c-1"
    slurm = ClusterHandle(
        "c", "r", "skypilot", "", {"sky_cluster": "c-1", "infra": "slurm/x", "name_on_cloud": "c-1-ab"}
    )
    assert ssh_argv(slurm, "true", node=1)[-2] == "c-1"
    assert "--relative=1 " in remote(slurm, "true", node=1)
    assert "--relative" not in remote(slurm, "true")


# --- action=logs: its keys ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"action": Action.status, "attempt": 1}, "attempt"),
        ({"action": Action.status, "rank": "0"}, "rank"),
        ({"action": Action.report, "follow": True}, "follow"),
        ({"action": Action.logs, "show_logs": True}, "show_logs"),
        ({"action": Action.logs, "attempt": 0}, "attempt"),
        ({"action": Action.logs, "rank": "-1"}, "rank"),
        ({"action": Action.logs, "rank": "01"}, "rank"),
        ({"action": Action.logs, "rank": "drivers"}, "rank"),
    ],
)
def test_the_logs_keys_are_refused_where_they_mean_nothing(tmp_path: Path, fields: dict[str, Any], key: str) -> None:
    cfg = Config(home=str(tmp_path), run_id="r", **fields)
    with pytest.raises(ConfigError, match=rf"^{key}: ") as err:
        validate(cfg)
    assert "\n" not in str(err.value)


def test_the_logs_keys_of_action_logs_pass(tmp_path: Path) -> None:
    for rank in (None, "0", "17", "driver"):
        validate(Config(home=str(tmp_path), run_id="r", action=Action.logs, attempt=2, rank=rank, follow=True))
    from orchestrator.config.compose import compose

    # The command line's rank=0 is a YAML integer: the key takes it as the rank's name.
    cfg = compose([f"home={tmp_path}", "action=logs", "run_id=r", "attempt=2", "rank=0", "follow=true"])
    assert (cfg.action, cfg.attempt, cfg.rank, cfg.follow) == (Action.logs, 2, "0", True)


# --- action=logs: a run's folder ---------------------------------------------------------------


def _run(tmp_path: Path) -> Path:
    """A run of two attempts: g1 in local-a, ended, its two ranks kept; g2 in local-b,
    its cluster lost with its nodes (no rank kept); the runs' clusters are a cloud's."""
    run_dir = tmp_path / "runs" / "r"
    j = Journal(str(run_dir / "journal.jsonl"))
    j.emit(RunStarted(run_id="r", pid=1, config={"cloud": {"provider": "skypilot"}}))
    for gen, region in ((1, "local-a"), (2, "local-b")):
        folder = run_dir / "attempts" / f"g{gen}"
        folder.mkdir(parents=True)
        (folder / "spec.json").write_text(json.dumps({"trainer": {"workers": 2}, "hpo": None}))
        (folder / "runtime.log").write_text(f"driver of {gen}\n")
        j.emit(AttemptStarted(gen, region))
        j.emit(Provisioned(region, f"r-{region}-g{gen}", generation=gen, info={"log_dir": f"/nodes/g{gen}"}))
        j.emit(AttemptEnded(gen, region))
    # A warm standby stood up for a third attempt and never activated: no attempt of the run.
    (run_dir / "attempts" / "g3").mkdir()
    (run_dir / "attempts" / "g3" / "runtime.log").write_text("standby waiting\n")
    (run_dir / "attempts" / "g1" / "rank-0.log").write_text("zero says hi\n")
    (run_dir / "attempts" / "g1" / "rank-1.log").write_text("one says hi")
    j.emit(LogsKept("r-local-a-g1", generation=1, ranks=(0, 1), bytes=24, cut=0))
    j.emit(LogsKept("r-local-b-g2", generation=2, ranks=(), bytes=0, cut=0, error="cluster r-local-b-g2 was lost"))
    return run_dir


def _show(run_dir: Path, attempt: int | None = None, rank: str | None = None) -> str:
    out = io.StringIO()
    show(str(run_dir), "r", attempt, rank, out)
    return out.getvalue()


def test_by_default_the_newest_attempt_its_driver_and_every_rank_each_under_a_header(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    assert _show(run_dir) == (
        f"==> attempt 2 (local-b), driver: {run_dir}/attempts/g2/runtime.log <==\n"
        "driver of 2\n"
        "\n==> attempt 2 (local-b), rank 0: not kept: cluster r-local-b-g2 was lost <==\n"
        "\n==> attempt 2 (local-b), rank 1: not kept: cluster r-local-b-g2 was lost <==\n"
    )


def test_one_attempts_one_rank_prints_that_file_alone(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    assert _show(run_dir, 1, "0") == "zero says hi\n"
    assert _show(run_dir, 1, "1") == "one says hi\n"
    assert _show(run_dir, 1, "driver") == "driver of 1\n"
    assert _show(run_dir, 2, "1") == "attempt 2, rank 1: not kept: cluster r-local-b-g2 was lost\n"


@pytest.mark.parametrize(
    ("attempt", "rank", "message"),
    [
        (3, None, "attempt: run 'r' has no attempt 3; its attempts: 1, 2"),
        (1, "2", "rank: attempt 1 has no rank 2; it has ranks 0, 1 and the driver"),
    ],
)
def test_a_missing_attempt_or_rank_names_the_key_and_what_there_is(
    tmp_path: Path, attempt: int, rank: str | None, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _show(_run(tmp_path), attempt, rank)
    assert str(err.value) == message


def test_the_command_prints_the_log_or_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.__main__ import main

    _run(tmp_path)
    assert main(["action=logs", "run_id=r", f"home={tmp_path}", "attempt=1", "rank=0"]) == 0
    assert capsys.readouterr().out == "zero says hi\n"
    assert main(["action=logs", "run_id=r", f"home={tmp_path}", "attempt=1", "rank=7"]) == 2
    assert capsys.readouterr().err == "error: rank: attempt 1 has no rank 7; it has ranks 0, 1 and the driver\n"


def test_a_missing_run_or_a_run_with_no_attempt_yet_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^run_id: no run named 'r' under "):
        _show(tmp_path / "runs" / "r")
    (tmp_path / "runs" / "r").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"^attempt: run 'r' has no attempt yet; add follow=true"):
        _show(tmp_path / "runs" / "r")


def test_a_running_attempts_ranks_are_read_where_they_are_written_when_that_is_here(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r"
    live = tmp_path / "cluster" / "logs"
    live.mkdir(parents=True)
    (live / "rank-0.log").write_text("live zero\n")
    j = Journal(str(run_dir / "journal.jsonl"))
    (run_dir / "attempts" / "g1").mkdir(parents=True)
    (run_dir / "attempts" / "g1" / "spec.json").write_text(json.dumps({"trainer": {"workers": 2}}))
    j.emit(AttemptStarted(1, "local-a"))
    j.emit(Provisioned("local-a", "r-local-a-g1", generation=1, info={"log_dir": str(live)}))
    j.emit(RunStarted(run_id="r", pid=1, config={"cloud": {"provider": "local"}}))
    assert _show(run_dir, 1, "0") == "live zero\n"
    assert _show(run_dir, 1, "1") == "attempt 1, rank 1: no output yet\n"
    assert "no driver log" in _show(run_dir, 1, "driver")
    j.emit(RunStarted(run_id="r", pid=1, config={"cloud": {"provider": "skypilot"}}))
    assert _show(run_dir, 1, "0") == (
        "attempt 1, rank 0: the attempt runs on its cluster; its ranks' logs are fetched when it ends\n"
    )


# --- following -------------------------------------------------------------------------------------


def test_follow_moves_from_attempt_to_attempt_and_ends_with_the_run(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    with (run_dir / "attempts" / "g1" / "runtime.log").open("a") as fh:
        fh.write("driver's last words, no newline")
    out = io.StringIO()
    polls = iter([False, True])
    Follow(str(run_dir), 1, None, out).run(poll_s=0.0, over=lambda _d: next(polls))
    assert out.getvalue() == (
        "==> attempt 1 (local-a) <==\n"
        "[driver] driver of 1\n"
        "[driver] driver's last words, no newline\n"
        "[rank 0] zero says hi\n"
        "[rank 1] one says hi\n"
        "==> attempt 2 (local-b) <==\n"
        "[driver] driver of 2\n"
        "-- attempt 2, rank 0: not kept: cluster r-local-b-g2 was lost\n"
        "-- attempt 2, rank 1: not kept: cluster r-local-b-g2 was lost\n"
    )


def test_follow_of_one_rank_prints_its_lines_unprefixed(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    out = io.StringIO()
    Follow(str(run_dir), 1, "0", out).run(poll_s=0.0, over=lambda _d: True)
    assert out.getvalue() == (
        "==> attempt 1 (local-a) <==\nzero says hi\n"
        "==> attempt 2 (local-b) <==\n-- attempt 2, rank 0: not kept: cluster r-local-b-g2 was lost\n"
    )


def test_follow_of_a_finished_run_prints_what_there_is_and_returns(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    (run_dir / "controller.lock").write_text("")
    out = io.StringIO()
    follow(str(run_dir), "r", 2, "driver", out, poll_s=0.0)  # no controller holds the lock: over
    assert out.getvalue() == "==> attempt 2 (local-b) <==\ndriver of 2\n"


# --- through the controller's loop ---------------------------------------------------------------


def test_a_lost_clusters_attempt_says_so_and_the_next_shows_its_ranks_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.config.compose import compose
    from orchestrator.control.wiring import build_controller

    monkeypatch.setattr(watch, "POLL_S", 0.002)
    monkeypatch.setattr(watch, "HEALTH_SETTLE_S", 0.01)
    cloud = FakeCloud(
        {"local-a": [Script(40, "cluster_lost")], "local-b": [Script()]}, log_root=str(tmp_path / "clusters")
    )
    cfg = compose(
        [
            f"home={tmp_path}",
            "run_id=r",
            "progress=false",
            "job.steps=60",
            *HEARTBEATS,
        ]
    )
    assert build_controller(cfg, cloud, "r", out=io.StringIO()).run()["status"] == "SUCCEEDED"  # type: ignore[arg-type]
    run_dir = tmp_path / "runs" / "r"
    facts = read_facts(str(run_dir))
    assert {g: (a.kept.ranks, a.kept.error) for g, a in facts.attempts.items() if a.kept} == {
        1: ((), "cluster r-local-a-g1 was lost; its nodes' logs went with it"),
        2: ((0,), None),
    }
    assert (
        _show(run_dir, 1, "0")
        == "attempt 1, rank 0: not kept: cluster r-local-a-g1 was lost; its nodes' logs went with it\n"
    )
    assert _show(run_dir, 2, "0") == "fake rank 0: attempt 2 restored step 40\n"


@pytest.mark.timeout(30)
def test_an_attempts_files_that_are_fifos_or_links_are_never_waited_on_nor_followed(tmp_path: Path) -> None:
    run_dir = _run(tmp_path)
    theirs = tmp_path / "theirs.log"
    theirs.write_text("not this run's\n")
    g2 = run_dir / "attempts" / "g2"
    (g2 / "spec.json").unlink()
    os.mkfifo(g2 / "spec.json")
    (g2 / "runtime.log").unlink()
    (g2 / "runtime.log").symlink_to(theirs)
    g1 = run_dir / "attempts" / "g1"
    (g1 / "runtime.log").unlink()
    os.mkfifo(g1 / "runtime.log")
    assert read_facts(str(run_dir)).attempts[2].workers is None  # its spec unread: the rank files say
    shown = _show(run_dir, attempt=2)
    assert "no driver log" in shown and "not this run's" not in shown
    assert "no driver log" in _show(run_dir, attempt=1, rank="driver")
