"""Opening a store's filesystem: fsspec, with every call bounded in time.

The defaults of s3fs and gcsfs hang for minutes against a server that stopped
answering (a read from a hung s3fs server had not failed after 400 s; gcsfs
waits about 33 s on a dead one); here every store gets
connect/read timeouts, few retries, and a per-call deadline that the async
filesystems honour. Credentials come from the standard chains (environment,
profiles, GOOGLE_APPLICATION_CREDENTIALS), never from the config.
"""

from __future__ import annotations

import os
from typing import Any

DEFAULT_OP_TIMEOUT_S = 30.0
# Option names that would put a credential in a config file (and from there into
# specs and journals). Credentials come from the environment instead.
SECRET_OPTIONS = frozenset(
    {"key", "secret", "token", "password", "session_token", "access_key", "secret_key", "credentials"}
)


class StorageSetupError(Exception):
    pass


def protocol_of(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def bounded_options(url: str, options: dict[str, Any] | None) -> dict[str, Any]:
    """fsspec options for ``url`` with bounded timeouts; user options win."""
    opts = dict(options or {})
    opts.pop("op_timeout_s", None)
    proto = protocol_of(url)
    if proto == "s3":
        endpoint = opts.pop("endpoint_url", None) or os.environ.get("AWS_ENDPOINT_URL")
        config = {
            "connect_timeout": 5,
            "read_timeout": 30,
            "retries": {"max_attempts": 2, "mode": "standard"},
            **opts.pop("config_kwargs", {}),
        }
        out: dict[str, Any] = {"config_kwargs": config, "skip_instance_cache": True, **opts}
        if endpoint:
            out["endpoint_url"] = endpoint
        return out
    if proto in ("gs", "gcs"):
        # Without this, every bucket costs a 60 s gRPC lookup against an http endpoint.
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        out = {"requests_timeout": 30, "skip_instance_cache": True, **opts}
        emulator = os.environ.get("STORAGE_EMULATOR_HOST")
        if emulator and "endpoint_url" not in out:
            out["endpoint_url"] = emulator if "://" in emulator else f"http://{emulator}"
            out.setdefault("token", "anon")  # an emulator takes no credentials
        return out
    return opts


def op_timeout(options: dict[str, Any] | None) -> float:
    return float((options or {}).get("op_timeout_s", DEFAULT_OP_TIMEOUT_S))


def open_fs(url: str, options: dict[str, Any] | None = None) -> tuple[Any, str]:
    import fsspec

    proto = protocol_of(url)
    try:
        fs, root = fsspec.core.url_to_fs(url, **bounded_options(url, options))
    except ImportError as exc:
        package = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs"}.get(proto, exc.name or "?")
        raise StorageSetupError(
            f"{url}: the {proto}:// protocol needs the {package} package; "
            f"install the project with its extras: pip install -c constraints.txt -e '.[test]'"
        ) from None
    if proto == "s3" and getattr(fs, "retries", None) is not None:
        fs.retries = 1  # s3fs's own retry loop, on top of botocore's
    return fs, root


_BOUNDED_CALLS = frozenset(
    {"ls", "glob", "find", "exists", "info", "cat_file", "pipe_file", "rm", "rm_file", "put_file", "get_file"}
)


class Bounded:
    """A filesystem whose calls end within ``timeout_s``: fsspec's async filesystems
    take a per-call deadline (the only thing that bounded a hung PUT in our trials)."""

    def __init__(self, fs: Any, timeout_s: float) -> None:
        self._fs = fs
        self._timeout = timeout_s if getattr(fs, "async_impl", False) else None

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._fs, name)
        if self._timeout is None or name not in _BOUNDED_CALLS:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", self._timeout)
            return attr(*args, **kwargs)

        return call

    @property
    def unwrapped(self) -> Any:
        return self._fs
