"""SkyPilot's SDK, imported here on first use and nowhere at module level: ``cloud=local``
needs none of it. The one gate SDK calls go through (``call``: transient errors retried,
``sys.tracebacklimit`` kept), the task validated by SkyPilot's own schema, and how its
answers read (statuses, streamed logs)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from providers.base import ProviderUnavailable
from providers.skypilot.errors import first_line, retryable
from recovery.detection import Health
from recovery.retry import Backoff, retrying

T = TypeVar("T")

INSTALL_HINT = (
    "the SkyPilot provider needs SkyPilot: pip install -c constraints.txt -e '.[aws]' for AWS, "
    "'.[gcp]' for GCP, '.[skypilot]' for Slurm or Kubernetes"
)
SDK_ATTEMPTS = 3
SDK_BACKOFF_S = 2.0


class SkyPilotMissing(ImportError, ProviderUnavailable):
    pass


def import_sky() -> Any:
    try:
        import sky
    except ImportError as exc:
        raise SkyPilotMissing(f"{INSTALL_HINT} ({exc})") from None
    return sky


def build_task(config: dict[str, Any], secrets: dict[str, str] | None = None) -> Any:
    """A sky.Task, validated by SkyPilot's own schema (sky.Task.from_yaml_config)."""
    sky = import_sky()
    plain = {k: v for k, v in config.items() if k != "secrets"}
    task = sky.Task.from_yaml_config(plain)
    if secrets:
        task.update_secrets(secrets)
    return task


def call(what: str, fn: Callable[[], T], say: Callable[[str], None]) -> T:
    """``fn()`` (an SDK call), retried on errors of the call itself (``errors.retryable``),
    each retry said through ``say``."""

    def guarded() -> T:
        # SkyPilot's print_exception_no_traceback sets sys.tracebacklimit to 0 and never
        # restores it when an exception passes: every later traceback in this process
        # (the controller's, a user's) would shrink to its last line.
        limit = getattr(sys, "tracebacklimit", None)
        try:
            return fn()
        finally:
            if limit is None:
                sys.__dict__.pop("tracebacklimit", None)
            else:
                sys.tracebacklimit = limit

    return retrying(
        guarded,
        attempts=SDK_ATTEMPTS,
        backoff=Backoff(SDK_BACKOFF_S),
        retryable=retryable,
        on_retry=lambda _n, exc, delay: say(f"{what}: {type(exc).__name__}: {first_line(exc)}; retrying in {delay:g}s"),
    )


def sky_health(statuses: list[str]) -> Health:
    """SkyPilot's statuses of a cluster after a forced refresh: no record, or a stopped
    cluster, is gone for sure; INIT (a node or Ray not answering) may pass."""
    if any(s == "UP" for s in statuses):
        return Health.UP
    if not statuses or all(s == "STOPPED" for s in statuses):
        return Health.GONE
    return Health.NOT_UP


def status_of(record: Any) -> str:
    status = record["status"] if isinstance(record, dict) else getattr(record, "status", None)
    return str(getattr(status, "value", status))


class Prefixed:
    """A text stream that prefixes SkyPilot's log lines, so a person sees what it is doing."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self._buf = ""

    def write(self, text: str) -> int:
        self._buf += re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            if line.strip():
                print(f"skypilot: {line.rstrip()}", file=self.out, flush=True)
        return len(text)

    def flush(self) -> None:
        pass
