"""The catalogs ``action=plan`` prices from: SkyPilot's own (``~/.sky/catalogs``, fetched
when missing), or, where a file is missing and cannot be fetched (offline), the snapshot
shipped in ``catalogs/`` beside this module.

SkyPilot resolves its catalog folder into a module constant and each cloud's catalog module
reads its CSVs when first imported, so the switch happens before the optimizer touches a
cloud, in the plan's process only; the user's own catalogs are never written."""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SNAPSHOT_ROOT = Path(__file__).parent / "catalogs"
SCHEMA = "v8"

# The files SkyPilot's optimizer reads for a cloud (its other catalogs, images and
# quotas, are read at launch only).
_FILES = {"AWS": ("aws/vms.csv",), "GCP": ("gcp/vms.csv",)}
_COMMON = ("common/accelerators.csv",)


@dataclass
class CatalogSource:
    snapshot_files: list[str] = field(default_factory=list)  # read from the snapshot
    reason: str = ""  # why SkyPilot's own could not be had
    date: str = ""  # the snapshot's

    def describe(self) -> str:
        if not self.snapshot_files:
            return "SkyPilot's (~/.sky/catalogs)"
        files = ", ".join(self.snapshot_files)
        return f"the snapshot of {self.date} shipped with orchestrator for {files} ({self.reason})"


def needed_files(clouds: set[str]) -> list[str]:
    """The catalog files the optimizer reads for these clouds (SkyPilot's names: AWS, GCP, ...);
    clouds without a CSV catalog (Slurm, Kubernetes) need none."""
    files = [f for c in sorted(clouds) for f in _FILES.get(c, ())]
    return [*_COMMON, *files] if files else []


def snapshot_date(root: Path = SNAPSHOT_ROOT) -> str:
    return (root / "SNAPSHOT").read_text(encoding="utf-8").strip()


def use_catalogs(clouds: set[str]) -> CatalogSource:
    """SkyPilot's catalogs for these clouds where it has them or can fetch them; otherwise
    point SkyPilot, in this process, at a private copy of the snapshot (with the user's
    files that exist copied over it, so only the missing ones come from the snapshot)."""
    from sky.catalog import common

    files = needed_files(clouds)
    unreachable, reason = [], ""
    sky_logger = logging.getLogger("sky")
    level = sky_logger.level
    sky_logger.setLevel(logging.CRITICAL)  # SkyPilot logs a fetch failure as an error
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # and draws a spinner
            for name in files:
                try:
                    common.read_catalog(name).columns  # noqa: B018 - loads it, fetching when missing
                except Exception as exc:  # a requests error, offline
                    unreachable.append(name)
                    reason = reason or f"SkyPilot could not fetch its own: {type(exc).__name__}"
    finally:
        sky_logger.setLevel(level)
    if not unreachable:
        return CatalogSource()
    own = common._ABSOLUTE_VERSIONED_CATALOG_DIR
    tmp = tempfile.mkdtemp(prefix="orch-catalogs-")
    atexit.register(shutil.rmtree, tmp, True)
    private = os.path.join(tmp, SCHEMA)
    # A copy (fresh mtimes, writable): SkyPilot may touch or refresh what it reads.
    shutil.copytree(SNAPSHOT_ROOT / SCHEMA, private)
    for name in files:
        if name not in unreachable:
            shutil.copyfile(os.path.join(own, name), os.path.join(private, name))
    common._ABSOLUTE_VERSIONED_CATALOG_DIR = private
    _repoint_loaded(common, own)
    return CatalogSource(snapshot_files=unreachable, reason=reason, date=snapshot_date())


def _repoint_loaded(common: object, own: str) -> None:
    """Catalogs SkyPilot's modules already opened at import (the accelerator registry's) keep
    the old folder: open them again from the new one."""
    lazy = common.LazyDataFrame  # type: ignore[attr-defined]
    for name, module in list(sys.modules.items()):
        if not name.startswith("sky.") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            path = getattr(value, "_filename", "") if isinstance(value, lazy) else ""
            if path.startswith(own + os.sep):
                setattr(module, attr, common.read_catalog(os.path.relpath(path, own)))  # type: ignore[attr-defined]
