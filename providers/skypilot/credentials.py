"""Credentials on their way to a SkyPilot cluster: which of the controller's variables a
run's stores need on the nodes, which entries travel as SkyPilot secrets (never task envs)
or on ssh's stdin (never a command line), and the clouds' credentials checked on this
machine before anything launches (``precheck``, the one function here that imports SkyPilot)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from providers.base import ProvisionError, ProvisionErrorKind
from providers.skypilot.errors import first_line
from providers.skypilot.regions import cloud_of
from providers.skypilot.sdk import import_sky

if TYPE_CHECKING:
    from orchestrator.config.schema import RegionConfig

# Environment variables that are credentials: passed as SkyPilot secrets, never as envs.
SECRET_ENV = re.compile(r"(SECRET|TOKEN|PASSWORD|CREDENTIAL|ACCESS_KEY|PRIVATE_KEY)", re.IGNORECASE)
# Store credentials of the controller's environment the runtime needs on the nodes, by the
# URL scheme of the stores that need them: only a run with an s3:// store (or control
# store) sends AWS keys to its clusters. Nodes reach gs:// with their own service account.
FORWARDED_SECRETS = {"s3://": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}
# The variable of the cluster's Ray token: a SkyPilot secret on the nodes, stdin for the runtime.
RAY_TOKEN_ENV = "RAY_AUTH_TOKEN"


def forwarded_secrets(store_urls: Iterable[str]) -> tuple[str, ...]:
    """The controller's credential variables the run's stores need on the nodes."""
    urls = [u for u in store_urls if u]
    needed = [names for scheme, names in FORWARDED_SECRETS.items() if any(u.startswith(scheme) for u in urls)]
    return tuple(name for names in needed for name in names)


def split_secrets(env: dict[str, str], forward: Iterable[str] = ()) -> tuple[dict[str, str], dict[str, str]]:
    """(envs, secrets): credentials go to SkyPilot secrets, which SkyPilot never writes
    to its task records or logs; the rest are plain task envs. ``forward``: variables
    of the controller's environment to send too (``forwarded_secrets``)."""
    envs = {k: v for k, v in env.items() if not SECRET_ENV.search(k)}
    secrets = {k: v for k, v in env.items() if SECRET_ENV.search(k)}
    secrets.update({k: os.environ[k] for k in forward if os.environ.get(k)})
    return envs, secrets


def stdin_env(env: dict[str, str]) -> dict[str, str]:
    """The runtime's environment entries that must not travel on a command line: the
    run's key and anything named like a credential. A value is one line (hex for the key)."""
    from orchestrator.wire.runkey import ENV as RUN_KEY_ENV

    hidden = {k: v for k, v in env.items() if k == RUN_KEY_ENV or SECRET_ENV.search(k)}
    for k, v in hidden.items():
        if "\n" in v or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise ValueError(f"environment entry {k!r} cannot be passed on stdin")
    return hidden


# The Python modules SkyPilot's check of each cloud (sky.clouds class names) imports, and
# the install that brings them here. Looked for before SkyPilot's check, whose hint for a
# missing SDK names its own packages and conda rather than this project's extras.
CLOUD_SDKS: dict[str, tuple[tuple[str, ...], str]] = {
    "AWS": (("boto3", "botocore"), "pip install -c constraints.txt -e '.[aws]'"),
    "GCP": (("googleapiclient", "google.auth"), "pip install -c constraints.txt -e '.[gcp]'"),
    "Slurm": (("hostlist",), "pip install -c constraints.txt -e '.[skypilot]'"),
    # '.[skypilot]' is SkyPilot with its Slurm support; SkyPilot's kubernetes extra adds the SDK.
    "Kubernetes": (("kubernetes",), "pip install -c constraints.txt -e '.[skypilot]' 'skypilot[kubernetes]'"),
}
# The command each cloud's check runs (`aws --version`, gcloud's credentials), and how to get it.
CLOUD_COMMANDS: dict[str, tuple[str, str]] = {
    "AWS": ("aws", "pip install -c constraints.txt -e '.[aws]' (its awscli)"),
    "GCP": ("gcloud", "install the Google Cloud CLI, then gcloud init and gcloud auth application-default login"),
}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def missing_tools(cloud: str) -> str | None:
    """What this machine lacks for SkyPilot to check ``cloud`` (a sky.clouds class name), with
    this project's install for it; None when its SDK's modules and its command are here."""
    modules, install = CLOUD_SDKS.get(cloud, ((), ""))
    absent = [m for m in modules if not _importable(m)]
    if absent:
        return f"its SDK is not installed (no module {', '.join(absent)}); install it: {install}"
    if cloud not in CLOUD_COMMANDS:
        return None
    command, get = CLOUD_COMMANDS[cloud]
    if shutil.which(command) is not None:
        return None
    beside = Path(sys.executable).parent
    if (beside / command).is_file():  # installed in this venv, which the shell has not activated
        return f"the {command} command is not on PATH; activate the venv that has it or add {beside} to PATH"
    return f"the {command} command is not installed; {get}"


def precheck(regions: dict[str, RegionConfig]) -> None:
    """Every cloud the candidate regions use has its SDK (``missing_tools``) and credentials,
    checked by SkyPilot's own cloud classes on this machine (no API server, nothing launched).
    ProvisionError(PRECHECK) names the region, the cloud, what is missing and how to get it."""
    import_sky()
    from sky import clouds

    checked: dict[str, tuple[bool, str | None]] = {}
    for name, rc in regions.items():
        cloud = cloud_of(rc)
        if cloud not in checked and (missing := missing_tools(cloud)):
            checked[cloud] = (False, missing)
        if cloud not in checked:
            cls = getattr(clouds, cloud)
            try:
                ok, reason = cls.check_credentials(clouds.CloudCapability.COMPUTE)
            except Exception as exc:  # a broken SDK install is a reason not to launch
                ok, reason = False, f"{type(exc).__name__}: {first_line(exc)}"
            checked[cloud] = (bool(ok), _reason_text(reason))
        ok, reason = checked[cloud]
        if not ok:
            raise ProvisionError(
                ProvisionErrorKind.PRECHECK,
                name,
                f"SkyPilot cannot use {cloud} ({rc.infra}): {reason}",
            )


def _reason_text(reason: Any) -> str:
    if isinstance(reason, dict):  # per capability
        reason = "; ".join(str(v) for v in reason.values() if v)
    text = " ".join(str(reason or "no reason given").split())
    return text[:600]
