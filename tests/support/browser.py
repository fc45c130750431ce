"""A real headless Chromium for the console's browser tests, driven by Selenium with the
browser and driver this machine's packages installed (Debian's ``chromium`` and
``chromium-driver``), named explicitly so that Selenium never looks for, or downloads,
a driver of its own. And ``action=console`` started as a user starts it, its URL read
from what it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.paths import REPO
from tests.support.runs import CI_SETUP_DONE_ENV, env_for, skip_unless_strict, wait_for_ci_setup

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# .ci/run installs Chromium with the on-prem tests' packages, in the background, and writes
# the file this names once apt-get is done (before Slurm's set-up, which this does not need).
CI_PACKAGES_DONE_ENV = "ORCH_CI_PACKAGES_DONE"
URL = re.compile(r"http://\S+/\?token=[0-9a-f]+")


def settled(driver: Any, read: Any, timeout_s: float = 15.0) -> Any:
    """``read(driver)``, read again while the page's script replaces what it reads (the
    tables are rebuilt at each poll: an element found may be gone when it is read)."""
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, timeout_s, poll_frequency=0.1, ignored_exceptions=page_changing())
    return wait.until(lambda d: (read(d),))[0]


def click(driver: Any, by: str, value: str) -> None:
    """Click the element, found again if the page's script replaced it meanwhile."""
    settled(driver, lambda d: d.find_element(by, value).click())


def page_changing() -> tuple[type[Exception], ...]:
    """What reading a page that is being replaced raises: a wait reads it again."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    return (NoSuchElementException, StaleElementReferenceException)


def wait_for_packages(timeout_s: float = 1200.0) -> None:
    """Wait for CI's background apt-get (where it runs one); fail or skip when Chromium or
    ChromeDriver is not there after it (a developer's machine without them skips)."""
    done = os.environ.get(CI_PACKAGES_DONE_ENV)
    if done:
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(2.0)
        if not os.path.exists(done):
            skip_unless_strict(f"CI's packages were not installed within {timeout_s:.0f} s ({CI_PACKAGES_DONE_ENV})")
    elif os.environ.get(CI_SETUP_DONE_ENV):
        why = wait_for_ci_setup(timeout_s)
        if why is not None:
            skip_unless_strict(why)
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        skip_unless_strict(
            f"{' and '.join(missing)} not installed: the console's browser test needs Debian's chromium and "
            "chromium-driver (apt-get install --no-install-recommends chromium chromium-driver)"
        )


def chromium(width: int = 1400, height: int = 1000) -> Any:
    """A headless Chromium through its ChromeDriver, the browser's console messages kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@contextmanager
def console(home: Path, *overrides: str, timeout_s: float = 60.0) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``python -m orchestrator action=console console.port=0`` over ``home``: the URL it
    printed, and the process. Stopped with Ctrl-C (SIGINT) on the way out."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "action=console", "console.port=0", f"home={home}", *overrides],
        cwd=REPO,
        env=env_for(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + timeout_s
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline() if proc.stdout else ""
            if not line and proc.poll() is not None:
                raise AssertionError(
                    f"action=console exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
                )
            found = URL.search(line)
            url = found.group(0) if found else None
        assert url is not None, "action=console printed no URL"
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(2)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def stopped(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """Ctrl-C to the console: its exit status and what it wrote on stderr."""
    proc.send_signal(2)
    _, err = proc.communicate(timeout=20)
    return proc.returncode, err


def page_errors(driver: Any) -> list[str]:
    """What the page's console said at SEVERE level: a script error, a CSP violation."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def full_page(driver: Any, path: Path, width: int = 1400) -> Path:
    """A screenshot of the whole page (the window grown to its height)."""
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(width, min(max(height + 120, 600), 4000))
    time.sleep(0.3)
    driver.save_screenshot(str(path))
    return path
