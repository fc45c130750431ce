"""Checks before anything launches: every candidate region's store is reachable and writable."""

from __future__ import annotations

import time
import uuid

from orchestrator.config import Config
from recovery.fsio import write_bytes
from recovery.storage import Bounded, StorageSetupError, op_timeout, open_fs


class PreflightError(Exception):
    pass


def preflight(cfg: Config) -> None:
    for region in cfg.candidate_regions():
        rc = cfg.cloud.regions[region]
        url = rc.store
        try:
            fs, root = open_fs(url, rc.storage_options)
            fs = Bounded(fs, min(op_timeout(rc.storage_options), 15.0))
            probe = f"{root.rstrip('/')}/.orchestrator-probe-{uuid.uuid4().hex[:8]}"
            write_bytes(fs, probe, str(time.time()).encode())
            fs.rm(probe)
        except StorageSetupError as exc:
            raise PreflightError(f"cloud.regions.{region}.store: {exc}") from None
        except Exception as exc:  # any client error is a reason not to launch
            raise PreflightError(
                f"cloud.regions.{region}.store: cannot write to {url} "
                f"({type(exc).__name__}: {_first_line(exc)}); check that the bucket or path exists, "
                "the endpoint is reachable and the credentials in the environment may write there"
            ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no detail"
