"""Checks before anything launches: every candidate region's store is reachable and writable."""

from __future__ import annotations

import time
import uuid

from orchestrator.config import Config
from recovery.fsio import write_bytes


class PreflightError(Exception):
    pass


def preflight(cfg: Config) -> None:
    import fsspec

    for region in cfg.candidate_regions():
        url = cfg.cloud.regions[region].store
        try:
            fs, root = fsspec.core.url_to_fs(url)
            probe = f"{root.rstrip('/')}/.orchestrator-probe-{uuid.uuid4().hex[:8]}"
            write_bytes(fs, probe, str(time.time()).encode())
            fs.rm(probe)
        except (OSError, ValueError, ImportError) as exc:
            raise PreflightError(
                f"cloud.regions.{region}.store: cannot write to {url} ({type(exc).__name__}: {exc}); "
                "check the path or bucket exists and is writable"
            ) from None
