"""A memory-bounded process for the tests: a cgroup of its own (v1 or v2), a limit, and
the peak the kernel charged to it. Needs root and a writable cgroup filesystem (CI's
machine has both); ``MemoryCgroup.create`` says why not where the machine lacks them."""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass

ROOT = "/sys/fs/cgroup"


@dataclass
class MemoryCgroup:
    path: str
    v2: bool

    @staticmethod
    def create() -> MemoryCgroup:
        """A new cgroup under the memory controller; OSError naming why it cannot be."""
        name = f"orch-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        v1 = os.path.join(ROOT, "memory")
        if os.path.isdir(v1):
            path, v2 = os.path.join(v1, name), False
        elif "memory" in _read(os.path.join(ROOT, "cgroup.subtree_control")).split():
            path, v2 = os.path.join(ROOT, name), True
        else:
            raise OSError(f"no memory cgroup controller under {ROOT}")
        os.mkdir(path)
        return MemoryCgroup(path, v2)

    def limit(self, nbytes: int) -> None:
        name = "memory.max" if self.v2 else "memory.limit_in_bytes"
        _write(os.path.join(self.path, name), str(nbytes))

    def peak(self) -> int:
        """The most memory (with page cache) charged to the cgroup so far."""
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        return int(_read(os.path.join(self.path, name)))

    def run(self, argv: list[str], cwd: str, timeout: float) -> subprocess.CompletedProcess[str]:
        """``argv`` inside the cgroup (joined before it executes anything)."""
        procs = os.path.join(self.path, "cgroup.procs")
        return subprocess.run(
            argv,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=lambda: _write(procs, str(os.getpid())),
        )

    def remove(self) -> None:
        os.rmdir(self.path)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
