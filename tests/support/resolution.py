"""Does ``pip install -c constraints.txt '.[aws,gcp]'`` resolve on a stock package index?

``pip install --dry-run --ignore-installed`` (what a clean venv would install) with pip's
configuration files and local wheel folders turned off, so that every package comes from
the index alone, with one exception: torch. The index's torch 2.13.0 is the CUDA build,
whose own wheel and NVIDIA wheels weigh gigabytes, and pip has to download a wheel to read
its requirements where the index serves no metadata files. So a folder holding only
torch's CPU wheel of the same version sits beside the index (the README's advice for a
CPU machine); its requirements are the CUDA build's less the NVIDIA libraries.

Minutes of downloads: CI starts it in the background beside its own install
(``python tests/support/resolution.py DIR``, see .ci/run) and the test reads ``DIR``; elsewhere
the suite starts it as soon as it knows the test will run. Standard library only, so
that a bare venv with a recent pip can run it.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXTRAS = "aws,gcp"
INDEX_URL = "https://pypi.org/simple"
TORCH = "2.13.0"
# CI's resolution, started before the suite: the folder it writes into.
CI_DIR_ENV = "ORCH_CI_RESOLVE_DIR"
# The suite's own run, when CI started none: (its folder, pip's process).
started: tuple[Path, subprocess.Popen[bytes] | None] | None = None


def cpu_torch_wheel() -> Path | None:
    """torch's CPU wheel of the pinned version, from the folders pip is told to look in."""
    dirs = [d for d in os.environ.get("PIP_FIND_LINKS", "").split() if d] + ["/opt/wheels"]
    for d in dirs:
        found = sorted(glob.glob(os.path.join(d, f"torch-{TORCH}+cpu-*.whl")))
        if found:
            return Path(found[0])
    return None


def start(out: Path, python: str = sys.executable) -> subprocess.Popen[bytes] | None:
    """Start the dry run, writing ``out``/report.json and ``out``/pip.log; None without
    a CPU wheel of torch (``out``/rc then says why)."""
    out.mkdir(parents=True, exist_ok=True)
    wheel = cpu_torch_wheel()
    if wheel is None:
        (out / "rc").write_text(f"none: no CPU wheel of torch {TORCH} on this machine\n")
        return None
    links = out / "links"
    links.mkdir(exist_ok=True)
    if not (links / wheel.name).exists():
        (links / wheel.name).symlink_to(wheel)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    # No pip.conf (its constraints, extra index and wheel folder), no cache.
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_DEFAULT_TIMEOUT="60")
    if os.environ.get("PIP_CERT"):
        env["PIP_CERT"] = os.environ["PIP_CERT"]
    cmd = [
        python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-cache-dir",
        "--index-url", INDEX_URL, "--find-links", str(links), "--report", str(out / "report.json"),
        "-c", str(REPO / "constraints.txt"), f"{REPO}[{EXTRAS}]",
    ]  # fmt: skip
    with open(out / "pip.log", "w") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=out)


def wait(out: Path, proc: subprocess.Popen[bytes] | None, timeout_s: float = 1200.0) -> tuple[str, dict | None, str]:
    """(pip's exit status or why there is none, its report, the log's tail)."""
    deadline = time.monotonic() + timeout_s
    if proc is not None:
        try:
            (out / "rc").write_text(f"{proc.wait(timeout=timeout_s)}\n")
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            (out / "rc").write_text(f"timeout: pip ran past {timeout_s:g}s\n")
    while not (out / "rc").exists() and time.monotonic() < deadline:
        time.sleep(1.0)
    code = (out / "rc").read_text().strip() if (out / "rc").exists() else f"timeout: no answer in {timeout_s:g}s"
    log = out / "pip.log"
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    report_file = out / "report.json"
    report = json.loads(report_file.read_text()) if code == "0" and report_file.exists() else None
    return code, report, tail


if __name__ == "__main__":
    where = Path(sys.argv[1])
    wait(where, start(where))
