"""SkyPilot's exceptions as the failure policy sees them (no capacity, precheck, transient),
and which of them an SDK call retries. SkyPilot is imported inside the functions, which
only run on an exception SkyPilot raised."""

from __future__ import annotations

import re
from dataclasses import dataclass

from providers.base import ProvisionErrorKind


@dataclass
class Classified:
    kind: ProvisionErrorKind
    message: str


def classify(exc: BaseException) -> Classified:
    """SkyPilot's exceptions as the failure policy sees them: no capacity (try the next
    region), precheck (credentials, quota, config: fail fast), transient (retry)."""
    from sky import exceptions as e

    text = first_line(exc)
    name = type(exc).__name__
    if isinstance(exc, e.ResourcesUnavailableError):
        # SkyPilot's own failover history says why each placement was refused.
        history = list(getattr(exc, "failover_history", None) or [])
        if history and all(_is_precheck(h) for h in history):
            cause = history[-1]
            return Classified(ProvisionErrorKind.PRECHECK, f"{type(cause).__name__}: {first_line(cause)}")
        if _mentions_quota(text):
            return Classified(ProvisionErrorKind.PRECHECK, f"quota: {text}")
        return Classified(ProvisionErrorKind.NO_CAPACITY, f"{name}: {text}")
    if _is_precheck(exc):
        return Classified(ProvisionErrorKind.PRECHECK, f"{name}: {text}")
    return Classified(ProvisionErrorKind.TRANSIENT, f"{name}: {text}")


def _is_precheck(exc: BaseException) -> bool:
    from sky import exceptions as e

    precheck = (
        e.InvalidCloudCredentials,
        e.InvalidCloudConfigs,
        e.NoCloudAccessError,
        e.CloudUserIdentityError,
        e.ClusterOwnerIdentityMismatchError,
        e.ProvisionPrechecksError,
        e.ResourcesMismatchError,
        e.InvalidSkyPilotConfigError,
        e.InvalidClusterNameError,
        e.NotSupportedError,
        e.PermissionDeniedError,
        e.UserRequestRejectedByPolicy,
        e.ApiServerAuthenticationError,
        e.APIVersionMismatchError,
    )
    if isinstance(exc, precheck):
        return True
    return _mentions_quota(first_line(exc))


def _mentions_quota(text: str) -> bool:
    return bool(re.search(r"\bquota\b|QuotaExceeded|VcpuLimitExceeded", text, re.IGNORECASE))


def retryable(exc: BaseException) -> bool:
    """Errors of the SDK call itself (the local API server, the network), not of the cloud."""
    from sky import exceptions as e

    return isinstance(
        exc,
        (e.ApiServerConnectionError, e.NetworkError, e.ClusterStatusFetchingError, e.RequestAlreadyExistsError),
    ) or isinstance(exc, (ConnectionError, TimeoutError))


def first_line(exc: BaseException) -> str:
    """An exception's first line without SkyPilot's colour codes (plan shows the optimizer's, too)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


def one_line(exc: BaseException, limit: int = 400) -> str:
    """An exception's whole message on one line, for a table row: a header line ending in ':'
    leads, the detail lines follow joined by '; ' (an optimizer's mismatch is in its
    details, not its header); an unreachable host is named instead of urllib3's chain."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    host = re.search(r"HTTPS?ConnectionPool\(host='([^']+)'", text)
    if host:
        return f"cannot reach {host.group(1)} (offline?)"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    head, rest = (lines[0] + " ", lines[1:]) if lines[0].endswith(":") and len(lines) > 1 else ("", lines)
    out = head + "; ".join(rest)
    return out if len(out) <= limit else out[: limit - 3] + "..."
