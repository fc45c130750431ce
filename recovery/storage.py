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
import re
from typing import Any
from urllib.parse import urlsplit

DEFAULT_OP_TIMEOUT_S = 30.0
# The protocols a store or the control channel may use: ones this project installs a
# client for (s3fs, gcsfs) and shared folders. memory:// lives in one process, where
# no cluster can reach it.
STORE_PROTOCOLS = ("file", "s3", "gs", "gcs")
# Words of an option's name that make its value a credential (see find_secret).
SECRET_WORDS = frozenset(
    {"secret", "password", "passwd", "passphrase", "credential", "credentials", "token", "authorization"}
)
# "key" is a credential after one of these words, or as the whole name (s3fs's key=);
# a KMS key id (SSEKMSKeyId) or a cache key is not.
KEY_QUALIFIERS = frozenset(
    {"access", "secret", "private", "api", "account", "master", "shared", "signing", "sas", "customer"}
)
# The same, read in a name squashed to lowercase letters and digits, look-alike digits read
# as letters ("Secret-Access_Key", "secretaccesskey" and "s3cr3tAcce55Key" are one name).
SECRET_STEMS = frozenset(
    {
        *SECRET_WORDS - {"token"},
        *(q + "key" for q in KEY_QUALIFIERS),
        *(w + "token" for w in ("session", "security", "access", "refresh", "auth", "bearer", "id", "sas", "api")),
        "connectionstring",
    }
)
# Providers' option names that are a credential whole (s3fs's key/secret/token, paramiko's
# pkey, aiohttp's auth, Azure's sas), squashed as above.
CREDENTIAL_OPTIONS = frozenset({"key", "secret", "token", "pkey", "auth", "sas", "pwd", "pass", "cookie", "cookies"})
_LOOKALIKE = {
    one: str.maketrans({"0": "o", "1": one, "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"}) for one in "il"
}
# Values of a token option that choose a credential chain rather than hold a credential.
TOKEN_CHAINS = frozenset({"anon", "google_default", "cloud"})
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


class StorageSetupError(Exception):
    pass


def protocol_of(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def has_userinfo(url: str) -> bool:
    """``scheme://user:pass@host/...``: a credential inside a URL."""
    if "://" not in url:
        return False
    try:
        netloc = urlsplit(url).netloc
    except ValueError:  # a malformed netloc (an unclosed '[') still must not hide one
        netloc = url.split("://", 1)[1].split("/", 1)[0]
    return "@" in netloc


def credential_name(name: str) -> bool:
    """Whether an option of this name holds a credential: one of SECRET_WORDS among its
    words (split at '_', '-', '.' and camelCase), or "key" alone or after a KEY_QUALIFIERS
    word; or, squashed (``squashed``), one of CREDENTIAL_OPTIONS whole or holding one of
    SECRET_STEMS. ``aws_secret_access_key``, ``secretaccesskey``, ``Passw0rd``,
    ``client_secret``, ``SSECustomerKey``, ``sas_token``, ``Authorization`` are;
    ``endpoint_url``, ``region_name``, ``anon``, ``SSEKMSKeyId``, ``max_tokens`` are not."""
    for flat in squashed(name):
        if flat in CREDENTIAL_OPTIONS or any(stem in flat for stem in SECRET_STEMS):
            return True
    words = [w.lower().translate(_LOOKALIKE["i"]) for w in _WORD.findall(name)]
    if words == ["key"]:
        return True
    for i, word in enumerate(words):
        if word in SECRET_WORDS:
            return True
        if word == "key" and i > 0 and words[i - 1] in KEY_QUALIFIERS:
            return True
    return False


def squashed(name: str) -> set[str]:
    """``name`` as compared with credential names: NFKC, case-folded, look-alike digits read
    as letters ('1' both as 'i' and as 'l'), nothing but letters and digits kept."""
    import unicodedata

    text = unicodedata.normalize("NFKC", name).casefold()
    return {"".join(c for c in text.translate(table) if c.isalnum()) for table in _LOOKALIKE.values()}


def find_secret(value: Any, path: str = "") -> tuple[str, str] | None:
    """The first credential in fsspec options, as (dotted path, why), or None.

    A config is written to disk (a run's config.json, every attempt's runtime spec), so
    it must not hold one. At any depth of dicts and lists:
    - a value under a credential name (``credential_name``), unless it is null, a bool
      (a switch such as ``use_auth``) or, for a token, a chain's name (TOKEN_CHAINS:
      ``token: anon`` for emulators);
    - a URL with user information (``http://user:pass@host``), under any name.
    Credentials come from the standard chains instead: the environment, profiles,
    GOOGLE_APPLICATION_CREDENTIALS.
    """
    if isinstance(value, dict):
        for k, v in value.items():
            here = f"{path}.{k}" if path else str(k)
            if credential_name(str(k)) and not _harmless(str(k), v):
                return here, "credential"
            found = find_secret(v, here)
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = find_secret(v, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    if isinstance(value, str) and has_userinfo(value):
        return path, "userinfo"
    return None


class SecretInConfig(ValueError):
    """A credential reached a file that is written to disk; validation should have refused it."""


def refuse_secret(where: str, value: Any) -> None:
    """Raise SecretInConfig if ``value`` (stores and their options) holds a credential:
    the last guard before a config or a runtime spec is written to disk."""
    found = find_secret(value)
    if found is not None:
        path, why = found
        raise SecretInConfig(f"{where}: {path} holds a {'URL with user information' if why == 'userinfo' else why}")


def _harmless(name: str, value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return True
    is_token = "token" in (w.lower() for w in _WORD.findall(name))
    return is_token and isinstance(value, str) and value in TOKEN_CHAINS


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
    if proto == "file":
        from recovery.fsio import RegularFiles

        fs = RegularFiles(fs, root)
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
