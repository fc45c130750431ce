"""Where a run keeps its notify targets whole: ``<home>/runs/<run_id>/notify.secret``.

A webhook's path or query, and a command's arguments, often carry a token, so neither is
written to ``config.json``, the journal, an event, a log or the progress line. At the
run's start the controller writes them here, beside ``run.secret``: JSON, 0600, whole or
not at all (``recovery.fsio.write_private``); ``config.json`` names each target by what
may be shown of it after ``notify.secret:`` (``notify.secret:https://hooks.example.com``,
``notify.secret:python3``), and still reads back through ``config_from_plain``.

``action=resume`` reads the file back (``load``) with run.secret's permission check: one
that others can read is refused, in one line naming it. One that is missing or damaged,
or that names another target than config.json does, costs that target only: its
notifications are off for the resumed controller, which journals ``notify_off`` with
why and says it in one line; the run goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.config.notify_targets import validate_notify
from orchestrator.config.schema import NOTIFY_KEPT, NotifyConfig, env_name, kept_shown, webhook_endpoint
from orchestrator.errors import ConfigError
from orchestrator.runstate.rundir import NOTIFY_SECRET
from recovery.fsio import open_regular, write_private

VERSION = 1
# A notify.secret is a few hundred bytes; more than this is not one we wrote.
READ_MAX = 64 * 1024


class NotifySecretError(RuntimeError):
    """The run's notify.secret can be read by others; one line naming it."""


@dataclass(frozen=True)
class Lost:
    """A target config.json names as kept in notify.secret that notify.secret cannot give."""

    target: str  # command | webhook
    endpoint: str  # what config.json shows of it: scheme://host, or the program
    reason: str  # one line, never a value from the file


def kept(notify: NotifyConfig) -> NotifyConfig:
    """notify.* as config.json holds it: each target by what may be shown of it, after
    ``notify.secret:``; timeout_s as it is. A name already kept stays as it is."""
    _resolved(notify)
    argv = notify.argv() if notify.command is not None and kept_shown(notify.command) is None else None
    return replace(
        notify,
        command=notify.command if argv is None else NOTIFY_KEPT + argv[0],
        webhook=(
            notify.webhook
            if notify.webhook is None or kept_shown(notify.webhook) is not None
            else NOTIFY_KEPT + webhook_endpoint(notify.webhook)
        ),
    )


def _resolved(notify: NotifyConfig) -> None:
    if env_name(notify.webhook) is not None:
        raise ValueError("notify.webhook=env:VARNAME is read (config.notify_from_env) before it is kept")


def save(run_dir: str, notify: NotifyConfig) -> None:
    """Write ``run_dir/notify.secret`` with the targets given whole (none: no file, and
    none left from before)."""
    _resolved(notify)
    whole = {
        "command": None if kept_shown(notify.command) is not None else notify.command,
        "webhook": None if kept_shown(notify.webhook) is not None else notify.webhook,
    }
    if whole["command"] is None and whole["webhook"] is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(run_dir, NOTIFY_SECRET))
        return
    body = {"version": VERSION, "run_id": os.path.basename(os.path.normpath(run_dir)), **whole}
    write_private(os.path.join(run_dir, NOTIFY_SECRET), json.dumps(body, indent=1).encode())


def load(run_dir: str, notify: NotifyConfig) -> tuple[NotifyConfig, list[Lost]]:
    """``notify`` (as config.json names it) with each target kept in notify.secret taken
    from there; one notify.secret cannot give is off (None) and said in the list.
    NotifySecretError when the file can be read by others. A target given whole (a
    config.json from before notify.secret, or a fresh run's) is returned as it is."""
    names = {t: kept_shown(getattr(notify, t)) for t in ("command", "webhook")}
    names = {t: shown for t, shown in names.items() if shown is not None}
    if not names:
        return notify, []
    path = os.path.join(run_dir, NOTIFY_SECRET)
    try:
        saved: Any = _read(path)
        problem = None
    except FileNotFoundError:
        saved, problem = None, f"no {NOTIFY_SECRET} in the run's folder"
    except OSError as exc:
        saved, problem = None, f"cannot read {NOTIFY_SECRET}: {exc.strerror or type(exc).__name__}"
    except ValueError:
        saved, problem = None, f"{NOTIFY_SECRET} is damaged (not the JSON a run writes)"
    if problem is None:
        run_id = os.path.basename(os.path.normpath(run_dir))
        if not isinstance(saved, dict) or saved.get("version") != VERSION:
            problem = f"{NOTIFY_SECRET} is damaged (not the JSON a run writes)"
        elif saved.get("run_id") != run_id:
            problem = f"{NOTIFY_SECRET} is another run's"
    out = notify
    lost = []
    for target, shown in names.items():
        why = problem or _mismatch(target, shown, saved.get(target))
        if why is None:
            out = replace(out, **{target: saved[target]})
        else:
            out = replace(out, **{target: None})
            lost.append(Lost(target, shown, why))
    return out, lost


def _read(path: str) -> Any:
    """notify.secret's JSON: refused (NotifySecretError) when others can read it, as run.secret is."""
    # Not through a link, and never waiting on a FIFO planted in its place (UnsafeFile, an OSError).
    fd = open_regular(path, os.O_RDONLY)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & 0o077:
            raise NotifySecretError(f"{path}: readable by others (mode {mode:o}); chmod 600 it")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(READ_MAX + 1)
    finally:
        os.close(fd)
    if len(data) > READ_MAX:
        raise ValueError("too long")
    return json.loads(data)


def _mismatch(target: str, shown: str, value: Any) -> str | None:
    """Why ``value`` (from notify.secret) is not the target config.json names ``shown``; None if it is."""
    if value is None:
        return f"{NOTIFY_SECRET} holds no {target}"
    damaged = f"{NOTIFY_SECRET}'s {target} is damaged (not one a run can use)"
    if not isinstance(value, str) or kept_shown(value) is not None or env_name(value) is not None:
        return damaged
    try:
        validate_notify(NotifyConfig(**{target: value}))  # type: ignore[arg-type]
        same = (webhook_endpoint(value) if target == "webhook" else NotifyConfig(command=value).argv()[0]) == shown
    except (ConfigError, ValueError, IndexError):
        return damaged
    if not same:
        return f"{NOTIFY_SECRET}'s {target} is not the one config.json names"
    return None
