"""The manifest: the record that commits a checkpoint, and the pure checks on it."""

from __future__ import annotations

import hashlib
import json
import math
import posixpath
import re
from dataclasses import asdict, dataclass, field

from recovery.boundedjson import INT64, CodecError, decode

MANIFEST_NAME = "MANIFEST.json"
# 2: signed with the key of the generation that wrote it (recovery/keys.py); 1 was run-wide.
FORMAT_VERSION = 2
# Bounds on what a manifest read from a store may be: far above any real one (a sharded
# checkpoint of a thousand ranks with a few files each is under a megabyte).
MAX_MANIFEST_BYTES = 8 * 2**20
MAX_MANIFEST_DEPTH = 32
MAX_FILES = 100_000
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ManifestError(ValueError):
    """A manifest that cannot be trusted (malformed, or names a file outside its folder)."""


@dataclass(frozen=True)
class FileEntry:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    run_id: str
    step: int
    attempt: int  # the generation of the attempt that wrote it
    files: tuple[FileEntry, ...]
    committed_at: float
    region: str = ""
    extra: dict[str, object] = field(default_factory=dict)
    version: int = FORMAT_VERSION
    # HMAC-SHA256 (hex) of ``signed_bytes()`` under its generation's key (recovery/signing.py);
    # "" when unsigned, which no trust decision accepts.
    signature: str = ""

    def to_json(self) -> str:
        d = asdict(self)
        d["files"] = [asdict(f) for f in self.files]
        return json.dumps(d, sort_keys=True, indent=1)

    def signed_bytes(self) -> bytes:
        """The canonical form a signature covers: every field but the signature, as
        compact JSON with sorted keys. It goes through a JSON round trip first, so what
        is signed is what a reader parses back (a tuple in ``extra`` reads as a list)."""
        d = asdict(self)
        d["files"] = [asdict(f) for f in self.files]
        del d["signature"]
        plain = json.loads(json.dumps(d, sort_keys=True))
        return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()

    @staticmethod
    def from_json(text: str | bytes) -> Manifest:
        """The manifest ``text`` holds, or ManifestError naming what is wrong: bounded in size
        and depth, every field of its exact type and range (a store's bytes are untrusted)."""
        try:
            d = decode(text, max_bytes=MAX_MANIFEST_BYTES, max_depth=MAX_MANIFEST_DEPTH)
            if not isinstance(d, dict):
                raise ManifestError(f"expected an object, got {type(d).__name__}")
            files = d.get("files")
            if not isinstance(files, list) or len(files) > MAX_FILES:
                raise ManifestError(f"files: expected a list of at most {MAX_FILES} entries")
            m = Manifest(
                run_id=_text(d, "run_id", 256),
                step=_count(d, "step"),
                attempt=_count(d, "attempt"),
                files=tuple(_file_entry(f) for f in files),
                committed_at=_time(d.get("committed_at")),
                region=_text(d, "region", 256, default=""),
                extra=_extra(d.get("extra", {})),
                version=_count(d, "version", default=1),
                signature=_text(d, "signature", 256, default=""),
            )
        except CodecError as exc:
            raise ManifestError(f"malformed manifest: {exc}") from None
        except ManifestError as exc:
            raise ManifestError(f"malformed manifest: {exc}") from None
        for f in m.files:
            check_member_name(f.name)
        return m

    def entry(self, name: str) -> FileEntry:
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(name)


def checkpoint_digest(digests: dict[str, str]) -> str:
    """One digest for a whole checkpoint, from its manifest's files (name -> sha256):
    sha256 over ``"<name> <sha256>\\n"`` per file, sorted by name. Equal contents give
    equal digests whatever store, step or run they sit under."""
    text = "".join(f"{name} {digests[name]}\n" for name in sorted(digests))
    return hashlib.sha256(text.encode()).hexdigest()


def check_member_name(name: str) -> None:
    """A file named by a manifest must lie inside its checkpoint folder."""
    if (
        not name
        or name == MANIFEST_NAME
        or "://" in name
        or name.startswith(("/", "\\"))
        or "\\" in name
        or posixpath.normpath(name) != name
        or name.split("/")[0] == ".."
        or any(part in ("", ".", "..") for part in name.split("/"))
    ):
        raise ManifestError(f"manifest names a file outside its checkpoint folder: {name!r}")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""


def judge(manifest: Manifest, actual: dict[str, tuple[int, str | None]]) -> Verdict:
    """Whether the files found match the manifest.

    ``actual`` maps a file name to (size, sha256); sha256 is None when it was not
    computed because the size already differs.
    """
    for f in manifest.files:
        if f.name not in actual:
            return Verdict(False, f"{f.name} is missing")
        size, digest = actual[f.name]
        if size != f.size:
            return Verdict(False, f"{f.name} has {size} bytes, manifest says {f.size}")
        if digest != f.sha256:
            return Verdict(False, f"{f.name} sha256 mismatch")
    return Verdict(True)


_MISSING = object()


def _field(d: dict[str, object], key: str, default: object) -> object:
    value = d.get(key, default)
    if value is _MISSING:
        raise ManifestError(f"{key} is missing")
    return value


def _text(d: dict[str, object], key: str, limit: int, default: object = _MISSING) -> str:
    value = _field(d, key, default)
    if not isinstance(value, str) or len(value) > limit:
        raise ManifestError(f"{key}: expected a string of at most {limit} characters")
    return value


def _count(d: dict[str, object], key: str, default: object = _MISSING) -> int:
    value = _field(d, key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= INT64[1]:
        raise ManifestError(f"{key}: expected a non-negative integer, got {str(value)[:32]}")
    return value


def _time(value: object) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ManifestError(f"committed_at: expected a time in seconds, got {str(value)[:32]}")
    return float(value)


def _extra(value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        raise ManifestError(f"extra: expected an object, got {type(value).__name__}")
    return value


def _file_entry(value: object) -> FileEntry:
    if not isinstance(value, dict):
        raise ManifestError(f"files: expected objects, got {type(value).__name__}")
    name = _text(value, "name", 1024)
    sha = _text(value, "sha256", 64)
    if not _SHA256.fullmatch(sha):
        raise ManifestError(f"files: {name!r}: sha256 is not 64 lower-case hex digits")
    return FileEntry(name, _count(value, "size"), sha)
