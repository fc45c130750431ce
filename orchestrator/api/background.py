"""A run's controller started in the background, as ``detach=true`` starts it
(``orchestrator.commands.detach.start``), for ``launch`` and ``Run.resume``: a
controller that would not start is a RunError with the line its log gave."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.config.schema import Config
from orchestrator.errors import RunError


def start(cfg: Config, words: Sequence[str], run_id: str, wait_s: float) -> None:
    """The run's controller started in the background with ``words``; RunError with the
    reason its log gave when it ended before an attempt of its own, other than with
    nothing to do (status 0: a resumed run that had ended already)."""
    from orchestrator.commands import detach

    done = detach.start(cfg, words, run_id, wait_s)
    if done.code is None or done.code == 0:
        return
    if done.pid is None:
        raise RunError(run_id, done.said)
    raise RunError(
        run_id, refusal(done.said) or f"run {run_id}: its controller exited ({done.code}); see {done.log_path}"
    )


def refusal(log_tail: str) -> str:
    """The line a controller that would not start gave (its last ``error: ...``), or the
    last line it wrote."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error: "):
            return line.removeprefix("error: ")
    return lines[-1] if lines else ""
