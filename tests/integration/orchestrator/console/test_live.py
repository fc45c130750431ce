"""``action=console`` over a live run, in a real headless Chromium: a detached digits run
shows RUNNING in local-a; the Drill button on its page (kill_region) fails it over as
``action=drill`` does, and the runs table shows it RUNNING in local-b; the Stop button
ends it INTERRUPTED as ``action=stop`` does. The journal names the console as where the
drill and the stop were asked.

Needs Ray: the run starts real local Ray clusters (marked ``ray``). It runs the digits
job for real (some minutes on a 2-core machine); the browser's needs are
test_browser.py's (skipped without Chromium, failed under ORCHESTRATOR_STRICT_SKIPS=1).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.runstate.rundir import DRILL_NAME
from tests.support import browser
from tests.support.runs import orch, ray_pids, wait_no_new_ray

pytestmark = pytest.mark.ray

RUN = "console-live"
# A run long enough to lose a region and be stopped from the page afterwards.
OVERRIDES = (
    "job=digits",
    f"run_id={RUN}",
    "job.steps=100000",
    "progress=false",
    "detach=true",
)
RUNNING_S = 180.0  # the first cluster up and training
FAILOVER_S = 300.0  # the next region's cluster up and training again
STOP_S = 180.0  # clusters torn down, result.json written


def until(driver: Any, seconds: float, check: Any, what: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, seconds, poll_frequency=0.5, ignored_exceptions=browser.page_changing())
    wait.until(lambda d: check(d), message=what)


def row_of(driver: Any, run_id: str) -> list[str]:
    """The run's row in the runs table, cell by cell ([] while it is not there)."""
    for tr in driver.find_elements("css selector", "#runs-body tr"):
        cells = tr.find_elements("css selector", "td")
        if (
            cells
            and cells[0].find_elements("css selector", "a")
            and cells[0].find_element("css selector", "a").text == run_id
        ):
            return [c.text for c in cells]
    return []


def _failed_over_and_checkpointed(row: list[str]) -> bool:
    """RUNNING in local-b, one incident, and a checkpoint in local-b's store: the drill can
    land before the first checkpoint, and a stop before the next one would keep none."""
    return row[1:4:2] == ["RUNNING", "local-b"] and row[8] == "1" and "local-b: step" in row[5]


def _drill_asked(run_dir: Path) -> bool:
    journal = run_dir / "journal.jsonl"
    return (run_dir / DRILL_NAME).exists() or (journal.exists() and b'"drill_requested"' in journal.read_bytes())


@pytest.fixture
def live_console(orch_home: Path) -> Iterator[tuple[str, subprocess.Popen[str], Any]]:
    browser.wait_for_packages()
    with browser.console(orch_home) as (url, proc):
        driver = browser.chromium()
        try:
            yield url, proc, driver
        finally:
            driver.quit()


def test_a_drill_and_a_stop_from_the_page_act_on_the_run_as_action_drill_and_action_stop_do(
    orch_home: Path, live_console: tuple[str, subprocess.Popen[str], Any]
) -> None:
    url, proc, driver = live_console
    before = ray_pids()
    started = orch(orch_home, *OVERRIDES, timeout=120)
    assert started.returncode == 0, started.stderr[-2000:]
    run_dir = orch_home / "runs" / RUN
    try:
        driver.get(url)
        # Status and region are the 2nd and 4th cells (test_browser.py reads the same table).
        until(driver, RUNNING_S, lambda d: row_of(d, RUN)[1:4:2] == ["RUNNING", "local-a"], "RUNNING in local-a")
        browser.click(driver, "link text", RUN)
        until(driver, 30, lambda d: d.find_element("id", "actions").get_attribute("hidden") is None, "the buttons")
        browser.settled(driver, lambda d: d.find_element("css selector", "#fault option[value='kill_region']").click())
        browser.click(driver, "id", "drill")
        # The form's POST done (its request written, or the controller has taken it already)
        # before the page is left: leaving at once would cancel it.
        until(driver, 30, lambda d: _drill_asked(run_dir), "the drill asked")
        driver.get(url)
        until(
            driver,
            FAILOVER_S,
            lambda d: _failed_over_and_checkpointed(row_of(d, RUN)),
            "RUNNING in local-b after the failover, its incident counted, a checkpoint in its store",
        )
        browser.click(driver, "link text", RUN)
        until(driver, 30, lambda d: d.find_element("id", "actions").get_attribute("hidden") is None, "the buttons")
        until(driver, 60, lambda d: "local-a -> local-b" in d.find_element("id", "t-incidents").text, "the incident")
        browser.click(driver, "id", "stop")
        until(
            driver,
            STOP_S,
            lambda d: d.find_element("id", "f-status").text == "INTERRUPTED",
            "the run INTERRUPTED on its page",
        )
        reason = browser.settled(driver, lambda d: d.find_element("id", "f-reason").text)
        assert reason.startswith("stopped by action=stop (") and "from the console" in reason
        result = json.loads((run_dir / "result.json").read_text())
        assert result["status"] == "INTERRUPTED" and result["final_checkpoint"], result
        assert "action=resume goes on" in result["reason"] and "from the console" in result["reason"]
        journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
        (stopped,) = [e for e in journal if e["type"] == "transition" and e["to"] == "INTERRUPTED"]
        assert stopped["source"] == "console" and stopped["reason"] == result["reason"]
        # The drill as action=drill journals it: asked (from the console), injected, recovered.
        (asked,) = [e for e in journal if e["type"] == "drill_requested"]
        assert asked["source"] == "console" and asked["kind"] == "kill_region" and not asked.get("refused"), asked
        assert [e["kind"] for e in journal if e["type"] == "fault_injected"] == ["kill_region"]
        assert (result["incidents"][0]["from_region"], result["incidents"][0]["to_region"]) == ("local-a", "local-b")
        assert not (run_dir / "stop.request").exists(), "the controller took the request"
        assert browser.page_errors(driver) == []
    finally:
        # Whatever happened above, the run ends here (as action=stop ends it) before the test does.
        if not (run_dir / "result.json").exists():
            orch(orch_home, "action=stop", f"run_id={RUN}", timeout=200)
    assert not wait_no_new_ray(before, timeout_s=30), "the stopped run left Ray processes behind"
    code, err = browser.stopped(proc)
    assert code == 0 and "Traceback" not in err, err
