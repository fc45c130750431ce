"""``action=console`` in a real headless Chromium (Selenium), started as a user starts it,
over a home of synthetic runs (no Ray): the runs table, a run's failover and checkpoint
ages, a journal growing on the page without a reload, a stop from the page that writes
action=stop's request and a page that then says how the run ended, the regions page.

Screenshots of the three pages go to a temporary folder (``ORCH_CONSOLE_SCREENSHOTS``
names another: docs/images' come from there). Skipped where Chromium or ChromeDriver is
not installed; failed there under ORCHESTRATOR_STRICT_SKIPS=1 (CI installs both).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from orchestrator.control.controller import stopped_reason
from orchestrator.control.stopreq import STOP_NAME, parse_request, take_request
from orchestrator.runstate import events as E
from orchestrator.runstate import rundir
from orchestrator.runstate.journal import Journal, read_typed
from orchestrator.runstate.lifecycle import RunState
from orchestrator.runstate.rundir import lock_controller
from tests.support import browser
from tests.support.console_runs import live_run, make_run, rt, write_ended_result

FAILOVER = "digits-20261206-101500-3f2a"
LIVE = "digits-20261206-103000-5a91"
ENDED = {
    FAILOVER: ("failover", "digits", 900),
    "gpt-20261206-094012-8c1d": ("clean", "gpt", 3000),
    "digits-20261206-091130-77c0": ("failed", "digits", 4500),
    "digits_hpo-20261206-084500-0b3d": ("interrupted", "digits_hpo", 6000),
    "digits-20261206-080000-ab12": ("running", "digits", 8000),
}
WAIT_S = 15.0  # the page polls every 2 s


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """A home of ended runs and one live run, whose controller's lock this test holds."""
    home = tmp_path_factory.mktemp("console-home")
    now = time.time()
    for run_id, (shape, job, ago) in ENDED.items():
        make_run(home, run_id, shape, t0=now - ago, job=job)
    held = lock_controller(str(live_run(home, LIVE)))
    assert held is not None
    yield home, held
    held.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("ORCH_CONSOLE_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("console-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def served(home: tuple[Path, Any]) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    browser.wait_for_packages()
    with browser.console(home[0]) as (url, proc):
        yield url, proc


@pytest.fixture(scope="module")
def driver(served: tuple[str, subprocess.Popen[str]]) -> Iterator[Any]:
    d = browser.chromium()
    try:
        yield d
    finally:
        d.quit()


def base(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def until(driver: Any, check: Any, what: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    # An element read while the page is being replaced (a form's answer loading) is read again.
    wait = WebDriverWait(driver, WAIT_S, poll_frequency=0.2, ignored_exceptions=browser.page_changing())
    wait.until(lambda d: check(d), message=what)


def text(driver: Any, element_id: str) -> str:
    return str(browser.settled(driver, lambda d: d.find_element("id", element_id).text))


def test_the_printed_url_opens_the_runs_table_listing_every_run(
    served: tuple[str, subprocess.Popen[str]], driver: Any, shots: Path
) -> None:
    url, _ = served
    assert url.startswith("http://127.0.0.1:")
    driver.get(url)
    # The token went into the cookie and left the address bar.
    assert driver.current_url == base(url) + "/"
    until(driver, lambda d: "updated" in text(d, "live-state"), "the table's first live update")
    names = browser.settled(driver, lambda d: [a.text for a in d.find_elements("css selector", "#runs-body td.run a")])
    assert sorted(names) == sorted([*ENDED, LIVE])
    body = text(driver, "runs-body")
    assert "RUNNING" in body and "SUCCEEDED" in body and "CONTROLLER_DIED" in body and "local-b: step 500" in body
    browser.full_page(driver, shots / "console-runs.png")
    driver.set_window_size(1400, 1000)


def test_a_runs_page_shows_its_failover_and_checkpoint_ages(driver: Any, shots: Path) -> None:
    browser.click(driver, "link text", FAILOVER)
    until(driver, lambda d: d.find_element("tag name", "h1").text == FAILOVER, "the run's page")
    incidents = text(driver, "t-incidents")
    assert "kill_region (step 60)" in incidents and "local-a -> local-b" in incidents and "failover" in incidents
    stores = browser.settled(driver, lambda d: [r.text for r in d.find_elements("css selector", "#t-stores tr")])
    assert len(stores) == 3 and all(" ago" in row and "500" in row for row in stores)
    assert text(driver, "f-status") == "SUCCEEDED" and text(driver, "f-region") == "local-b"
    for figure in ("timeline", "loss"):
        until(
            driver,
            lambda d, f=figure: d.execute_script(f"return document.getElementById('{f}').naturalWidth") > 0,
            f"the {figure} figure loaded",
        )
    assert driver.find_element("id", "actions").get_attribute("hidden") is not None, "an ended run takes no stop"
    browser.full_page(driver, shots / "console-run.png")
    driver.set_window_size(1400, 1000)


def test_a_journal_that_grows_shows_on_the_page_without_a_reload(
    served: tuple[str, subprocess.Popen[str]], home: tuple[Path, Any], driver: Any
) -> None:
    url, _ = served
    driver.get(base(url) + f"/runs/{LIVE}")
    assert text(driver, "f-status") == "RUNNING"
    driver.execute_script("window.notReloaded = true;")
    now = time.time()
    Journal(str(home[0] / "runs" / LIVE / "journal.jsonl")).emit(
        rt(now, "checkpoint_committed", 1, step=300, region="local-a")
    )
    until(driver, lambda d: "300" in text(d, "t-stores"), "the new checkpoint in the stores table")
    Journal(str(home[0] / "runs" / LIVE / "journal.jsonl")).emit(
        E.StandbyReady(region="local-c", generation=2, cluster="c-local-c-g2")
    )
    until(driver, lambda d: "ready in local-c" in text(d, "f-standby"), "the standby's news")
    assert driver.execute_script("return window.notReloaded === true;"), "the page was reloaded"
    driver.get(base(url) + "/")
    driver.execute_script("window.notReloaded = true;")
    Journal(str(home[0] / "runs" / LIVE / "journal.jsonl")).emit(
        rt(time.time(), "replicated", 1, step=300, to="local-c", lag_s=0.3, **{"from": "local-a"})
    )
    until(driver, lambda d: "local-c: step 300" in text(d, "runs-body"), "the runs table's new checkpoint")
    assert driver.execute_script("return window.notReloaded === true;")


def test_a_stop_from_the_page_asks_the_controller_as_action_stop_does_and_the_page_says_so(
    served: tuple[str, subprocess.Popen[str]], home: tuple[Path, Any], driver: Any
) -> None:
    url, _ = served
    run_dir = home[0] / "runs" / LIVE
    driver.get(base(url) + f"/runs/{LIVE}")
    browser.click(driver, "id", "stop")
    until(driver, lambda d: "stop asked (" in text(d, "f-pending"), "the page saying the stop is asked")
    assert "from the console" in text(driver, "f-pending")
    request = parse_request((run_dir / STOP_NAME).read_bytes())
    assert request is not None and (request.action, request.source) == ("stop", "console")
    # The run's controller, as the real one does: takes the request, journals the stop, writes
    # the result, and lets go of its lock.
    taken = take_request(str(run_dir))
    assert taken == request
    journal = Journal(rundir.journal_path(str(run_dir)))
    journal.emit(E.AttemptEnded(generation=1, region="local-a", restored_step=0, last_step=300))
    journal.emit(
        E.Transition(
            to=RunState.INTERRUPTED, reason=stopped_reason(taken), region="local-a", generation=1, source="console"
        )
    )
    journal.emit(E.RunFinished(status="INTERRUPTED", final_step=300))
    write_ended_result(run_dir, LIVE, list(read_typed(rundir.journal_path(str(run_dir)))))
    home[1].close()
    until(driver, lambda d: text(d, "f-status") == "INTERRUPTED", "the page saying the run stopped")
    reason = text(driver, "f-reason")
    assert reason.startswith("stopped by action=stop (") and "from the console" in reason
    assert text(driver, "f-pending") == ""
    until(driver, lambda d: d.find_element("id", "actions").get_attribute("hidden") is not None, "no more stop")


def test_the_regions_page_shows_each_regions_failures_provisioning_and_price(
    served: tuple[str, subprocess.Popen[str]], driver: Any, shots: Path
) -> None:
    url, _ = served
    driver.get(base(url) + "/regions")
    table = driver.find_element("css selector", "table.regions").text
    for region, price in (("local-a", "$0.2/node-h"), ("local-b", "$0.3/node-h"), ("local-c", "$0.4/node-h")):
        assert region in table and price in table
    assert "Recent failures in local-a" in driver.find_element("tag name", "main").text
    browser.full_page(driver, shots / "console-regions.png")
    driver.set_window_size(1400, 1000)


def test_no_page_had_a_script_error_or_a_refused_resource_and_ctrl_c_ends_it_with_0(
    served: tuple[str, subprocess.Popen[str]], driver: Any, shots: Path
) -> None:
    assert browser.page_errors(driver) == []
    code, err = browser.stopped(served[1])
    assert code == 0 and "Traceback" not in err, err
    assert {p.name for p in shots.glob("*.png")} == {"console-runs.png", "console-run.png", "console-regions.png"}
    print(f"screenshots: {shots}")
