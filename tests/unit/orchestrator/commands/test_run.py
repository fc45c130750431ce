"""action=run's pure parts (orchestrator/commands/run.py): a new run's id and the command that
resumes one. Whole runs are tests/integration's."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from orchestrator.commands.run import new_run_id, resume_command, user_error_advice
from orchestrator.config.compose import compose

pytestmark = pytest.mark.unit


def test_a_new_run_id_is_the_jobs_name_the_time_and_a_random_tail() -> None:
    cfg = compose(["job=digits"])
    a, b = new_run_id(cfg), new_run_id(cfg)
    assert re.fullmatch(rf"{cfg.job.name}-\d{{8}}-\d{{6}}-[0-9a-f]{{4}}", a), a
    assert a != b or a[:-4] == b[:-4]


def test_the_resume_command_names_the_run_and_its_home_quoted(tmp_path: Path) -> None:
    home = tmp_path / "a home"
    cfg = compose([f"home={home}"])
    command = resume_command(cfg, "r-1")
    assert shlex.split(command) == ["python", "-m", "orchestrator", "action=resume", "run_id=r-1", f"home={home}"]


def test_local_servers_without_their_packages_is_one_line_naming_the_extra(monkeypatch) -> None:
    import orchestrator.commands.run as run_cmd

    cfg = compose(["cloud=local_cloudstores"])
    monkeypatch.setattr(run_cmd, "missing_packages", lambda: ["moto[server]"])
    assert "'.[localstores]'" in (run_cmd.local_stores_hint(cfg) or "")
    monkeypatch.setattr(run_cmd, "missing_packages", lambda: [])
    assert run_cmd.local_stores_hint(cfg) is None
    assert run_cmd.local_stores_hint(compose([])) is None


def test_a_run_the_workloads_code_failed_ends_with_one_line_saying_what_where_and_what_to_do() -> None:
    line = user_error_advice({"error": "ValueError: loss exploded", "step": 12, "site": "/proj/m.py:46"})
    assert line.startswith("the workload raised ValueError: loss exploded at /proj/m.py:46 in step 12; fix the code")
    assert "\n" not in line
    # What result.json may lack (a Ray Train function's step, a bug in no file of the user's).
    assert user_error_advice({"error": "KeyError: 'x'", "step": None, "site": None}).startswith(
        "the workload raised KeyError: 'x'; fix"
    )


def test_control_characters_from_the_cluster_are_shown_not_obeyed() -> None:
    line = user_error_advice({"error": "ValueError: \x1b[2Jgone", "step": 1, "site": "m.py:1"})
    assert "\x1b" not in line and "\\x1b[2Jgone" in line


def test_a_run_that_missed_an_objective_exits_with_its_own_status_naming_it() -> None:
    from orchestrator.commands.run import verdict
    from orchestrator.runstate.objectives import EXIT_OBJECTIVE_MISSED

    missed = {"met": False, "checked": [{"objective": "max_rto_s", "limit": 5.0, "measured": 9.5, "met": False}]}
    code, line = verdict("/h", "r1", {"status": "SUCCEEDED", "objectives": missed})
    assert code == EXIT_OBJECTIVE_MISSED == 4
    assert line == "error: run r1: objective missed: max_rto_s 5.0 (measured 9.5)"
    assert verdict("/h", "r1", {"status": "SUCCEEDED", "objectives": {**missed, "met": True}}) == (0, None)
    assert verdict("/h", "r1", {"status": "FAILED", "objectives": missed})[0] == 1
    cancelled = verdict("/h", "r1", {"status": "CANCELLED", "reason": "cancelled by action=cancel (a@b pid 1)"})
    assert cancelled == (130, "cancelled: cancelled by action=cancel (a@b pid 1)")


def test_a_controller_that_died_is_told_from_one_that_ended_or_refused() -> None:
    import signal

    from orchestrator.commands.run import died_of

    assert died_of(-signal.SIGKILL) == "SIGKILL" and died_of(-signal.SIGSEGV) == "SIGSEGV"
    assert died_of(1) == "an uncaught exception (exit 1)"
    for ended in (0, 2, 3, 4, 130):  # succeeded, refused (config), user error, objective missed, stopped
        assert died_of(ended) is None


def test_a_run_a_bug_ended_says_its_one_line_before_the_summary_and_the_rest_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import sys

    import orchestrator.commands.report as report
    import orchestrator.commands.status as status
    from orchestrator.commands.run import finish

    both = io.StringIO()  # a terminal: stdout and stderr in the order written
    monkeypatch.setattr(sys, "stdout", both)
    monkeypatch.setattr(sys, "stderr", both)
    monkeypatch.setattr(status, "summarize", lambda run_dir: None)
    monkeypatch.setattr(report, "write", lambda run_dir: ("incident report", "report.png"))
    bug = {"error": "ValueError: loss exploded", "step": 5, "site": "/p/m.py:9"}
    failed = {"status": "FAILED", "incidents": [], "user_error": bug}
    assert finish(compose([f"home={tmp_path}"]), "r1", failed) == 3
    lines = both.getvalue().splitlines()
    assert lines[0].startswith("error: run r1: the workload raised ValueError: loss exploded at /p/m.py:9 in step 5")
    assert [x for x in lines if x.startswith("error: ")] == [lines[0]]
    # Any other end keeps its line last.
    both.truncate(0)
    both.seek(0)
    assert finish(compose([f"home={tmp_path}"]), "r2", {"status": "INTERRUPTED", "incidents": []}) == 130
    assert both.getvalue().splitlines()[-1].startswith("interrupted: go on from the newest checkpoint")
