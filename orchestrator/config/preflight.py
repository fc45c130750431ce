"""Checks before anything launches: every candidate region's store, and the control store,
are reachable and writable. A failure names the key to fix (exit status 2). And one
warning: a control store whose takeover would find no checkpoint, since the stores are
folders only this machine reaches."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
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


# Filesystems that live on one machine: a folder on one of them is out of another's reach.
# Any other type (nfs, cifs, lustre, fuse mounts of buckets, ...) may be shared: no warning.
LOCAL_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "reiserfs", "jfs", "tmpfs", "ramfs", "overlay", "vfat"}
)


def mount_type(path: str, mounts: str = "/proc/mounts") -> str | None:
    """The filesystem type of the mount that holds ``path`` (its longest mount point that
    is a prefix), or None when the mount table cannot be read."""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as fh:
            table = [line.split()[1:3] for line in fh if len(line.split()) >= 3]
    except OSError:
        return None
    real = os.path.realpath(path)
    best: tuple[int, str] | None = None
    for point, kind in table:
        point = point.replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > best[0]):
            best = (len(point), kind)
    return None if best is None else best[1]


def takeover_warning(cfg: Config, fstype: Callable[[str], str | None] = mount_type) -> str | None:
    """One line when the run has a control store (so that another machine may take it
    over) yet its stores are folders on this machine's own disks: a taker would find no
    checkpoint to restore. None otherwise, and when the filesystems cannot be told."""
    if not cfg.cloud.control_store:
        return None
    local: list[str] = []
    kinds: set[str] = set()
    urls = [("cloud.control_store", cfg.cloud.control_store)]
    urls += [(f"cloud.regions.{r}.store", cfg.cloud.regions[r].store) for r in cfg.candidate_regions()]
    for key, url in urls:
        if not url.startswith("file://"):
            continue
        path = url[len("file://") :]
        while path and not os.path.exists(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)  # a store not made yet: the disk it will be on
        kind = fstype(path or "/")
        if kind in LOCAL_FILESYSTEMS:
            local.append(key)
            kinds.add(kind)
    if not local:
        return None
    named = ", ".join(local[:4]) + (f" and {len(local) - 4} more" if len(local) > 4 else "")
    return (
        f"warning: cloud.control_store is set for a takeover from another machine, but {named} "
        f"{'is a folder' if len(local) == 1 else 'are folders'} on this machine's own disk "
        f"({', '.join(sorted(kinds))}): a taker would find no checkpoint (or no mirror) there; set "
        "cloud.regions.<name>.store and cloud.control_store to storage both machines reach "
        "(s3://, gs://, or a shared mount)"
    )
