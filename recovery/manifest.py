"""The manifest: the record that commits a checkpoint, and the pure checks on it."""

from __future__ import annotations

import json
import posixpath
from dataclasses import asdict, dataclass, field

MANIFEST_NAME = "MANIFEST.json"
FORMAT_VERSION = 1


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
    # HMAC-SHA256 (hex) of ``signed_bytes()`` under the run's key (recovery/signing.py);
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
        try:
            d = json.loads(text)
            files = tuple(FileEntry(str(f["name"]), int(f["size"]), str(f["sha256"])) for f in d["files"])
            m = Manifest(
                run_id=str(d["run_id"]),
                step=int(d["step"]),
                attempt=int(d["attempt"]),
                files=files,
                committed_at=float(d["committed_at"]),
                region=str(d.get("region", "")),
                extra=dict(d.get("extra", {})),
                version=int(d.get("version", FORMAT_VERSION)),
                signature=str(d.get("signature", "")),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ManifestError(f"malformed manifest: {exc}") from None
        for f in m.files:
            check_member_name(f.name)
        return m

    def entry(self, name: str) -> FileEntry:
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(name)


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
