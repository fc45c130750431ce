"""Checks before anything launches: every candidate region's store, and the control store,
are reachable and writable. A failure names the key to fix (exit status 2)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from orchestrator.config.schema import Config
from recovery.fsio import write_bytes
from recovery.storage import Bounded, StorageSetupError, op_timeout, open_fs


class PreflightError(Exception):
    pass


def preflight(cfg: Config) -> None:
    for region in cfg.candidate_regions():
        rc = cfg.cloud.regions[region]
        probe(f"cloud.regions.{region}.store", f"cloud.regions.{region}.storage_options", rc.store, rc.storage_options)
    if cfg.cloud.control_store is not None:
        probe("cloud.control_store", "cloud.control_options", cfg.cloud.control_store, cfg.cloud.control_options)


def probe(url_key: str, options_key: str, url: str, options: dict[str, Any]) -> None:
    """Write and remove a small file under ``url``; PreflightError names the key at fault:
    the options when the filesystem refuses them or their endpoint does not answer,
    else the URL."""
    try:
        fs, root = open_fs(url, options)
    except StorageSetupError as exc:
        raise PreflightError(f"{url_key}: {exc}") from None
    except (TypeError, ValueError) as exc:  # an option the filesystem does not take
        raise PreflightError(
            f"{options_key}: the {url.split('://', 1)[0]}:// filesystem refused them ({_first_line(exc)}); "
            "remove or correct the option it names"
        ) from None
    try:
        fs = Bounded(fs, min(op_timeout(options), 15.0))
        path = f"{root.rstrip('/')}/.orchestrator-probe-{uuid.uuid4().hex[:8]}"
        write_bytes(fs, path, str(time.time()).encode())
        fs.rm(path)
    except Exception as exc:  # any client error is a reason not to launch
        detail = f"{type(exc).__name__}: {_first_line(exc)}"
        if isinstance(exc, TypeError):  # s3fs passes options on at the first call, not at open
            raise PreflightError(
                f"{options_key}: the {url.split('://', 1)[0]}:// filesystem refused them ({detail}); "
                "remove or correct the option it names"
            ) from None
        if options.get("endpoint_url") and _unreachable(exc):
            raise PreflightError(
                f"{options_key}.endpoint_url: {options['endpoint_url']} does not answer ({detail}); "
                "check the address and that the server is up"
            ) from None
        raise PreflightError(
            f"{url_key}: cannot write to {url} ({detail}); check that the bucket or path exists, "
            "the endpoint is reachable and the credentials in the environment may write there"
        ) from None


def _unreachable(exc: BaseException) -> bool:
    """A connection that failed, as opposed to a server that answered no."""
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            return False
        name = type(seen).__name__
        if isinstance(seen, ConnectionError | TimeoutError) or "Connect" in name or "Endpoint" in name:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no detail"
