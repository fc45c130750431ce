"""The checks of notify.*: a webhook or command that could never work is refused before the
run starts; ``env:VARNAME`` is read at its start; a config.json's ``notify.secret:`` names are
a run's own, never a user's to give.

No message shows the webhook's URL or the command's arguments: a token may be in either.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping

from orchestrator.config.checks import MIN_SECONDS
from orchestrator.config.schema import NOTIFY_ENV, NOTIFY_KEPT, NotifyConfig, env_name, kept_shown, webhook_endpoint
from orchestrator.errors import ConfigError
from orchestrator.wire.codec import show

# The longest notify.timeout_s: the end of a run waits for its last notification up to this long.
MAX_NOTIFY_TIMEOUT_S = 60.0
NOTIFY_SCHEMES = ("http", "https")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def validate_notify(notify: NotifyConfig) -> None:
    """Targets that could never work are refused before the run starts, not found out at
    its first incident. No message shows the webhook's URL or the command's arguments:
    a token may be in either."""
    if env_name(notify.webhook) is not None:
        _validate_env_name(str(env_name(notify.webhook)))
    elif kept_shown(notify.webhook) is not None:
        _validate_kept_webhook(str(kept_shown(notify.webhook)))
    elif notify.webhook is not None:
        _validate_webhook(notify.webhook)
    if kept_shown(notify.command) is not None:
        if not str(kept_shown(notify.command)).strip():
            raise ConfigError("notify.command", f"{NOTIFY_KEPT!r} names no program; expected {NOTIFY_KEPT}PROGRAM")
    elif notify.command is not None:
        try:
            argv = notify.argv()
        except ValueError as exc:
            raise ConfigError(
                "notify.command", f"cannot be split into words ({exc}); close its quotes, or null for none"
            ) from None
        if not argv:
            raise ConfigError(
                "notify.command", "is empty; give a program and its arguments, e.g. 'python3 notify.py', or null"
            )
    if not notify.timeout_s >= MIN_SECONDS:
        raise ConfigError("notify.timeout_s", f"got {notify.timeout_s}; expected seconds > 0, at least {MIN_SECONDS:g}")
    if notify.timeout_s > MAX_NOTIFY_TIMEOUT_S:
        raise ConfigError(
            "notify.timeout_s",
            f"got {notify.timeout_s}; at most {MAX_NOTIFY_TIMEOUT_S:g} (the end of a run waits for its last "
            "notification up to this long)",
        )


def _validate_env_name(name: str) -> None:
    if not _ENV_NAME.fullmatch(name):
        raise ConfigError(
            "notify.webhook",
            # Not shown: a URL given as env:https://... would be.
            "names no environment variable after env:; expected env:VARNAME (letters, digits and _, "
            "not starting with a digit)",
        )


def _validate_kept_webhook(shown: str) -> None:
    """``notify.secret:scheme://host[:port]``: a config.json's name for a webhook kept in
    the run's notify.secret. Anything more (a path, a query) is refused, unshown: a token
    may have been written there by hand."""
    try:
        _validate_webhook(shown)
        whole = webhook_endpoint(shown) == shown
    except ConfigError:
        whole = False
    if not whole:
        raise ConfigError(
            "notify.webhook",
            f"names a webhook kept in notify.secret by more or less than its scheme and host; expected "
            f"{NOTIFY_KEPT}https://host",
        )


def refuse_kept(notify: NotifyConfig) -> None:
    """A ``notify.secret:`` name is a run's config.json's to write, never a user's to give:
    a new run has no notify.secret to take the target from."""
    for key, value in (("notify.webhook", notify.webhook), ("notify.command", notify.command)):
        if kept_shown(value) is not None:
            given = "the URL, or env:VARNAME" if key == "notify.webhook" else "the command"
            raise ConfigError(
                key,
                f"{NOTIFY_KEPT}... is how a run's config.json names a target kept in the run's notify.secret; "
                f"give {given}",
            )


def notify_from_env(notify: NotifyConfig, environ: Mapping[str, str] | None = None) -> NotifyConfig:
    """``notify`` with notify.webhook=env:VARNAME replaced by the URL in VARNAME, at the run's
    start; ConfigError naming notify.webhook and VARNAME (never the value) if VARNAME is unset
    or holds no http:// or https:// URL. Anything else is returned as it is."""
    from dataclasses import replace

    name = env_name(notify.webhook)
    if name is None:
        return notify
    env = os.environ if environ is None else environ
    url = env.get(name)
    if url is None:
        raise ConfigError(
            "notify.webhook",
            f"{NOTIFY_ENV}{name}: the environment variable {name} is not set; export it with the webhook's URL",
        )
    try:
        _validate_webhook(url)
    except ConfigError as exc:
        why = str(exc).removeprefix("notify.webhook: ")
        raise ConfigError(
            "notify.webhook", f"{NOTIFY_ENV}{name}: {name} holds no usable http:// or https:// URL ({why})"
        ) from None
    return replace(notify, webhook=url)


def check_notify_program(notify: NotifyConfig) -> None:
    """notify.command's program can be run here: checked for a new run (with the user's
    code), not in validate, since a resume must not be refused for what only
    notifications need (a failing command is journaled then, never fatal)."""
    argv = notify.argv()
    if argv and shutil.which(argv[0]) is None:
        raise ConfigError(
            "notify.command",
            f"{show(argv[0])} is not a program that can be run (on PATH, or a path to an executable file)",
        )


def _validate_webhook(url: str) -> None:
    from urllib.parse import urlsplit

    key = "notify.webhook"
    if not url.strip():
        raise ConfigError(key, "is empty; give an http:// or https:// URL, or null for none")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ConfigError(key, "holds a space or a control character; percent-encode it")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port out of range or not a number raises here
    except ValueError as exc:
        raise ConfigError(
            key, f"is no URL that can be read ({_no_url_in(exc, url)}); expected https://host/path"
        ) from None
    scheme = parts.scheme.lower()
    if "://" in url and scheme not in NOTIFY_SCHEMES:
        raise ConfigError(
            key, f"got a URL of scheme {show(scheme)}; expected http:// or https:// (it receives a JSON POST)"
        )
    if scheme not in NOTIFY_SCHEMES or not parts.netloc:
        raise ConfigError(key, "is no absolute URL; expected an http:// or https:// URL (it receives a JSON POST)")
    if "@" in parts.netloc:
        raise ConfigError(
            key,
            "holds a user name or password ('user:pass@'), which is never sent; put the token in the URL's "
            "path or query, which only this run's notify.secret keeps",
        )
    if not parts.hostname:
        raise ConfigError(key, f"got {scheme}:// with no host; expected {scheme}://host/path")


def _no_url_in(exc: ValueError, url: str) -> str:
    # urllib's message, without the URL should it quote it (a token may be in it).
    return str(exc).replace(url, "...")
