"""Checkpoint store over fsspec: files first, the manifest last as the commit.

Layout: ``<store>/<run_id>/checkpoints/step-<N>-g<G>/{<files>, MANIFEST.json}``, where ``G``
is the generation (attempt) that wrote it: a fenced zombie's late puts of step N land in its
own folder and can never overwrite a newer generation's files of the same step. Two
generations' checkpoints of one step may both exist; a reader takes the highest generation
(``pick_folder``). Folders named ``step-<N>`` (written by earlier versions) are still read, as
the lowest generation. A checkpoint exists only once its manifest does, and counts only if its manifest
is signed with the run's key (recovery/signing.py) and every file it names verifies
(size and sha256). A store opened without the key can list checkpoints, never trust one.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from recovery.fencing import (
    FENCE_NAME,
    MAX_FENCE_BYTES,
    Admits,
    FencedError,
    FenceRejected,
    Lineage,
    decode_fence,
    encode_fence,
)
from recovery.fetch import fetch, fetch_to_file
from recovery.fsio import TooLarge, UnsafeFile, is_local, read_capped, write_bytes
from recovery.keys import AttemptKeys
from recovery.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    FileEntry,
    Manifest,
    ManifestError,
    Verdict,
    check_member_name,
    judge,
)
from recovery.signing import SigningError, check, signed
from recovery.storage import Bounded, StorageSetupError, op_timeout, open_fs

SkipHook = Callable[[int, str], None]
K = TypeVar("K", int, tuple[int, int])
Keep = Callable[[str], bool]  # which of a checkpoint's files a reader keeps the bytes of


class StoreError(Exception):
    """A store could not be reached or read; the message names the store."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def step_dir_name(step: int, generation: int | None = None) -> str:
    """The folder of ``step`` written by ``generation`` (None: the old, step-only name)."""
    return f"step-{step}" if generation is None else f"step-{step}-g{generation}"


def parse_step_folder(name: str) -> tuple[int, int | None] | None:
    """(step, generation) of a checkpoint folder's name (a path's last part); generation
    None for an old ``step-N`` folder; None for anything else."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    if not base.startswith("step-"):
        return None
    digits, sep, gen = base[len("step-") :].partition("-g")
    if not digits.isdigit() or (sep and not gen.isdigit()):
        return None
    return int(digits), (int(gen) if sep else None)


def parse_step_dir(name: str) -> int | None:
    """The step of a checkpoint folder's name, whichever generation wrote it."""
    parsed = parse_step_folder(name)
    return None if parsed is None else parsed[0]


def folder_rank(step: int, generation: int | None) -> tuple[int, int]:
    """How folders order: by step, then by generation; an old folder (no generation) lowest."""
    return step, -1 if generation is None else generation


def relabelled(folder: str, manifest: Manifest) -> Verdict:
    """Whether ``manifest`` was written by the generation its folder is named after (an old
    step-only folder names none): a manifest moved into another generation's folder is not."""
    parsed = parse_step_folder(folder)
    if parsed is None or parsed[1] is None or parsed[1] == manifest.attempt:
        return Verdict(True)
    return Verdict(False, f"written by generation {manifest.attempt}, in the folder of generation {parsed[1]}")


def pick_folder(folders: Iterable[tuple[int, int | None]]) -> tuple[int, int | None] | None:
    """The folder a restore takes among ``folders`` ((step, generation)): the newest step,
    and for equal steps the highest generation. None when there is none."""
    return max(folders, key=lambda f: folder_rank(*f), default=None)


class CheckpointStore:
    def __init__(
        self,
        url: str,
        region: str = "",
        storage_options: dict[str, Any] | None = None,
        key: AttemptKeys | None = None,
    ):
        self.url = url.rstrip("/")
        self.region = region
        # The run's keys (recovery/keys.py): sign what this store commits and the fences the
        # controller writes, and are what trusting a manifest or a fence takes.
        self.key = key
        self.storage_options = dict(storage_options or {})
        try:
            fs, self.root = open_fs(self.url, self.storage_options)
        except (StorageSetupError, ValueError, OSError) as exc:
            raise StoreError(f"region {region or '?'}: store {self.url}: {exc}") from None
        self.fs = Bounded(fs, op_timeout(self.storage_options))
        # (run, step) of foreign entries retention has reported: said once, not at every commit.
        self._left_alone: set[tuple[str, int, int]] = set()

    def __repr__(self) -> str:
        return f"CheckpointStore({self.url!r}, region={self.region!r})"

    def _error(self, what: str, exc: BaseException) -> StoreError:
        text = str(exc).strip().splitlines()
        detail = f"{type(exc).__name__}: {text[0] if text else 'no detail'}"
        return StoreError(f"region {self.region or '?'}: store {self.url}: {what}: {detail}")

    # --- paths -------------------------------------------------------------
    def run_root(self, run_id: str) -> str:
        return f"{self.root}/{run_id}/checkpoints"

    def step_path(self, run_id: str, step: int) -> str:
        """The folder a reader takes for ``step`` (``pick_folder``: of its folders, the highest
        generation's with a manifest, else the highest generation's)."""
        return f"{self.run_root(run_id)}/{self._folder(run_id, step)}"

    def write_path(self, run_id: str, step: int, generation: int | None) -> str:
        """The folder ``generation`` writes ``step`` into."""
        return f"{self.run_root(run_id)}/{step_dir_name(step, generation)}"

    def manifest_path(self, manifest: Manifest) -> str:
        """The folder ``manifest`` was read from: its generation's, or an old step-only one."""
        names = self._folders(run_id := manifest.run_id).get(manifest.step, {})
        gen: int | None = manifest.attempt if manifest.attempt in names or None not in names else None
        return self.write_path(run_id, manifest.step, gen)

    def checkpoint_url(self, run_id: str, step: int) -> str:
        return f"{self.url}/{run_id}/checkpoints/{self._folder(run_id, step)}"

    def generation_of(self, generation: int | None) -> int | None:
        """The generation a write goes under: the one given, else the keys' (an attempt's keys are its generation's)."""
        if generation is not None:
            return generation
        return self.key.generation if self.key is not None else None

    def _folder(self, run_id: str, step: int) -> str:
        gens = self._folders(run_id).get(step, {})
        committed = [(step, g) for g, ok in gens.items() if ok]
        best = pick_folder(committed or [(step, g) for g in gens])
        return step_dir_name(step, best[1] if best else self.generation_of(None))

    # --- writing -----------------------------------------------------------
    def verify_copy(self, run_id: str, step: int, name: str, data: bytes, generation: int | None = None) -> None:
        """Check that a file just written holds ``data``: by the MD5 the object store
        computed of what it received when it reports one, else by reading it back."""
        path = f"{self.write_path(run_id, step, self.generation_of(generation))}/{name}"
        try:
            if is_local(self.fs):
                ok = sha256_hex(self.fs.cat_file(path)) == sha256_hex(data)
            else:
                info = self.fs.info(path)
                ok = int(info.get("size", -1)) == len(data) and _md5_matches(info, data)
                if ok is None:
                    ok = sha256_hex(self.fs.cat_file(path)) == sha256_hex(data)
        except Exception as exc:  # any client error names the store
            raise self._error("cannot verify " + path, exc) from None
        if not ok:
            raise StoreError(f"region {self.region or '?'}: store {self.url}: copy of {path} does not verify")

    def landed(self, run_id: str, step: int, name: str, size: int, generation: int | None = None) -> bool:
        """Whether ``generation``'s folder of ``step`` holds ``name`` at ``size`` bytes: a file
        another rank put. Its bytes are not read here: every put is whole or absent
        (``write_bytes``), the rank that put it hashed them once for the manifest and
        withdraws a copy the store received otherwise (``confirm_put``), and a restore
        checks every byte against the manifest."""
        path = f"{self.write_path(run_id, step, self.generation_of(generation))}/{name}"
        try:
            return int(self.fs.info(path).get("size", -1)) == size
        except FileNotFoundError:
            return False
        except Exception as exc:  # any client error names the store
            raise self._error("cannot look at " + path, exc) from None

    def confirm_put(self, run_id: str, step: int, name: str, data: bytes, generation: int | None = None) -> bool:
        """After a put of ``data``: False, and the copy removed, where the store reports an
        MD5 of what it received that is not ``data``'s (rank 0 then finds no such file and
        does not commit it). True where it matches or cannot be told without reading the
        copy back (a local file, written whole from these bytes; a store with no MD5)."""
        if is_local(self.fs):
            return True
        path = f"{self.write_path(run_id, step, self.generation_of(generation))}/{name}"
        try:
            info = self.fs.info(path)
            if int(info.get("size", -1)) == len(data) and _md5_matches(info, data) is not False:
                return True
            self.fs.rm_file(path)
        except Exception as exc:  # any client error names the store
            raise self._error("cannot confirm " + path, exc) from None
        return False

    def write_fence(self, run_id: str, lineage: Lineage) -> None:
        """The controller's fence (signed with its fence key, which no attempt holds)."""
        if self.key is None:
            raise SigningError(f"store {self.url}: no run key: the fence of {run_id} cannot be signed")
        self._write(f"{self.root}/{run_id}/{FENCE_NAME}", encode_fence(run_id, lineage, self.key.sign_fence))

    def put(
        self, run_id: str, step: int, name: str, data: bytes, generation: int | None = None, sha256: str | None = None
    ) -> FileEntry:
        """Write one file of ``step`` into ``generation``'s folder (default: the keys' generation).
        ``sha256``: of ``data``, where the caller has it already (each byte is hashed once)."""
        check_member_name(name)
        self._write(f"{self.write_path(run_id, step, self.generation_of(generation))}/{name}", data)
        return FileEntry(name=name, size=len(data), sha256=sha256 or sha256_hex(data))

    def commit(
        self,
        run_id: str,
        step: int,
        attempt: int,
        files: Iterable[FileEntry],
        extra: dict[str, object] | None = None,
        committed_at: float | None = None,
        fenced: bool = False,
    ) -> Manifest:
        """Write the manifest: the checkpoint exists from here on. With ``fenced``,
        refuse (FencedError) if a newer generation has fenced this run's store, and
        do not commit (StoreError, retried like any store error) while its fence
        cannot be read: a torn fence may hide a newer generation."""
        if fenced:
            try:
                fence = read_fence(self, run_id)
            except FenceRejected:
                fence = None  # not the controller's: it can neither stop nor allow anything
            if fence is not None and fence.generation > attempt:
                raise FencedError(
                    f"attempt {attempt} is fenced in {self.url}: generation {fence.generation} has taken over"
                )
        if self.key is None:
            raise SigningError(f"store {self.url}: no run key: {run_id} step {step} cannot be signed")
        manifest = Manifest(
            run_id=run_id,
            step=step,
            attempt=attempt,
            files=tuple(sorted(files, key=lambda f: f.name)),
            committed_at=time.time() if committed_at is None else committed_at,
            region=self.region,
            extra=dict(extra or {}),
        )
        manifest = signed(manifest, self.key)
        self._write(f"{self.write_path(run_id, step, attempt)}/{MANIFEST_NAME}", manifest.to_json().encode())
        return manifest

    def _write(self, path: str, data: bytes) -> None:
        try:
            write_bytes(self.fs, path, data)
        except Exception as exc:  # any client error (botocore, google-auth) names the store
            raise self._error("cannot write " + path, exc) from None

    # --- reading -----------------------------------------------------------
    def committed_steps(self, run_id: str) -> list[int]:
        """Steps whose manifest exists, oldest first. Verification is separate."""
        return sorted(s for s, has_manifest in self._step_dirs(run_id).items() if has_manifest)

    def all_steps(self, run_id: str) -> dict[int, bool]:
        """Every step folder, committed or not (a torn write leaves one without manifest)."""
        return self._step_dirs(run_id)

    def _step_dirs(self, run_id: str) -> dict[int, bool]:
        return {step: any(gens.values()) for step, gens in self._folders(run_id).items()}

    def folders(self, run_id: str) -> dict[int, dict[int | None, bool]]:
        """Every step folder: step -> {generation (None: an old step-only one): committed?}."""
        return self._folders(run_id)

    def _folders(self, run_id: str) -> dict[int, dict[int | None, bool]]:
        """step -> {generation (None: an old step-only folder) -> whether it has a manifest}."""
        root = self.run_root(run_id)
        try:
            self.fs.invalidate_cache()
            if not self.fs.exists(root):
                return {}
            entries = self.fs.ls(root, detail=False)
            manifests = set(self.fs.glob(f"{root}/step-*/{MANIFEST_NAME}"))
        except FileNotFoundError:
            return {}
        except Exception as exc:  # any client error (botocore, google-auth) names the store
            raise self._error("cannot list " + root, exc) from None
        out: dict[int, dict[int | None, bool]] = {}
        for e in entries:
            parsed = parse_step_folder(e)
            if parsed is not None:
                out.setdefault(parsed[0], {})[parsed[1]] = False
        for m in manifests:
            parsed = parse_step_folder(m.rsplit("/", 1)[0])
            if parsed is not None:
                out.setdefault(parsed[0], {})[parsed[1]] = True
        return out

    def manifest(self, run_id: str, step: int, folder: str | None = None) -> Manifest | None:
        """The manifest of ``step`` (in ``folder``, a folder name; default: ``step_path``'s).
        One whose generation is not its folder's (a relabelled folder) is a ManifestError."""
        folder = folder or self._folder(run_id, step)
        path = f"{self.run_root(run_id)}/{folder}/{MANIFEST_NAME}"
        try:
            raw = read_capped(self.fs, path, MAX_MANIFEST_BYTES)
        except FileNotFoundError:
            return None
        except UnsafeFile as exc:
            raise ManifestError(f"manifest at {path}: {exc.strerror}") from None
        except TooLarge as exc:
            raise ManifestError(str(exc)) from None
        except Exception as exc:  # any client error (botocore, google-auth) names the store
            raise self._error("cannot read " + path, exc) from None
        m = Manifest.from_json(raw)
        if m.step != step or m.run_id != run_id:
            raise ManifestError(f"manifest at {path} describes {m.run_id} step {m.step}")
        return m

    def trusts(self, manifest: Manifest) -> Verdict:
        """Whether ``manifest`` is signed with this run's key (its files not looked at)."""
        return check(manifest, self.key)

    def trusted_manifest(self, run_id: str, step: int, folder: str | None = None) -> tuple[Manifest | None, Verdict]:
        """The manifest of ``step`` and whether it is signed with the run's key: a cheap
        check (no file read) for "is this step really there"."""
        try:
            m = self.manifest(run_id, step, folder)
        except ManifestError as exc:
            return None, Verdict(False, str(exc))
        if m is None:
            return None, Verdict(False, "no manifest (never committed)")
        verdict = self.trusts(m)
        if verdict.ok:
            verdict = relabelled(folder or self._folder(run_id, step), m)
        return m, verdict

    def verify(self, run_id: str, step: int) -> Verdict:
        return self.load(run_id, step)[1]

    def load(
        self,
        run_id: str,
        step: int,
        lineage: Admits | None = None,
        keep: Keep | None = None,
        before_read: Callable[[Manifest], None] | None = None,
        sized: Keep | None = None,
        generation: int | None = None,
    ) -> tuple[Manifest | None, Verdict, dict[str, bytes]]:
        """The manifest of ``step`` (read once), whether it is signed, on ``lineage`` and
        its files verify, and the verified bytes of the files ``keep`` says yes to (each
        file read once, verified as it streams in). The signature and the lineage come
        first: a stranger's files are never read, nor a fenced checkpoint's.
        ``before_read``: called with a manifest that passed both, before its files are read.
        ``sized``: files found in one listing of the folder, each a regular file of its
        manifest's size, and never read here: the rank that loads one verifies its bytes as
        they stream in, so a restore hashes each byte once (a sharded checkpoint's rank
        files, another rank's files). A verdict that passes such a file says only that much.
        ``generation``: that generation's folder of ``step``, not the one a reader takes."""
        folder = self._folder(run_id, step) if generation is None else step_dir_name(step, generation)
        m, verdict = self.trusted_manifest(run_id, step, folder)
        if m is None or not verdict.ok:
            return m, verdict, {}
        if lineage is not None and not lineage.allows(m.attempt, m.step):
            return m, Verdict(False, lineage.why_not(m.attempt, m.step)), {}
        if before_read is not None:
            before_read(m)
        where = f"{self.run_root(run_id)}/{folder}"
        paths = {f"{where}/{f.name}": f for f in m.files}
        only_sized = [path for path, f in paths.items() if sized is not None and sized(f.name)]
        ranged = not is_local(self.fs)
        try:
            got = fetch(self.fs, {path: f.size for path, f in paths.items() if path not in only_sized}, ranged=ranged)
            listed = self._listed(where) if only_sized else {}
        except Exception as exc:  # a timeout, a folder in its place: the store's error, named
            raise self._error(f"cannot read {where}", exc) from None
        unsafe = next((g.reason for g in got.values() if g.reason), None)
        if unsafe is not None:
            return m, Verdict(False, unsafe), {}
        actual = {
            f.name: (len(g.data), g.sha256 if len(g.data) == f.size else None)
            for path, f in paths.items()
            if path in got and (g := got[path]).data is not None
        }
        for path in only_sized:
            f = paths[path]
            found = listed.get(f.name)
            if isinstance(found, str):
                return m, Verdict(False, f"{f.name}: {found}"), {}
            if found is not None:
                # Its digest is its reader's to check (see ``sized``): only its size is judged here.
                actual[f.name] = (found, f.sha256 if found == f.size else None)
        verdict = judge(m, actual)
        if not verdict.ok:
            return m, verdict, {}
        kept = {
            f.name: got[path].data for path, f in paths.items() if path in got and keep is not None and keep(f.name)
        }
        return m, verdict, {name: data for name, data in kept.items() if data is not None}

    def _listed(self, where: str) -> dict[str, int | str]:
        """A folder's files, its subfolders' too, in one listing: name (its path in the
        folder) -> size, or why it is no regular file (a link, a FIFO), for ``load``'s
        ``sized`` files."""
        out: dict[str, int | str] = {}
        self.fs.invalidate_cache(where)
        prefix = self.fs._strip_protocol(where).rstrip("/") + "/"
        for path, entry in self.fs.find(where, detail=True).items():
            name = str(path).removeprefix(prefix)
            if entry.get("islink"):
                out[name] = "a link"
            elif entry.get("type") != "file":
                out[name] = f"not a regular file ({entry.get('type') or 'unknown'})"
            else:
                out[name] = int(entry.get("size") or 0)
        return out

    def candidates(self, run_id: str, at_most: int | None = None, exclude: Collection[int] = ()) -> list[int]:
        """Committed steps a restore may consider, newest first (none verified yet)."""
        return [
            s for s in reversed(self.committed_steps(run_id)) if (at_most is None or s <= at_most) and s not in exclude
        ]

    def latest_verified(
        self,
        run_id: str,
        on_skip: SkipHook | None = None,
        at_most: int | None = None,
        lineage: Lineage | None = None,
        exclude: frozenset[int] = frozenset(),
    ) -> Manifest | None:
        """The newest committed checkpoint whose files verify and that is on the
        lineage (see recovery/fencing.py); skips are reported. ``exclude``: steps
        already found bad by a reader."""
        for step in self.candidates(run_id, at_most, exclude):
            m, verdict, _ = self.load(run_id, step, lineage)
            if m is not None and verdict.ok:
                return m
            if on_skip is not None:
                on_skip(step, verdict.reason)
        return None

    def read(self, manifest: Manifest, name: str) -> bytes:
        """One file of a committed checkpoint, verified against its manifest."""
        return self.read_many(manifest, [name])[name]

    def read_many(self, manifest: Manifest, names: Collection[str]) -> dict[str, bytes]:
        """Files of a committed checkpoint, read at once, each verified against its manifest."""
        where = self.manifest_path(manifest)
        entries = {f"{where}/{n}": manifest.entry(n) for n in names}
        try:
            got = fetch(self.fs, {path: e.size for path, e in entries.items()}, ranged=not is_local(self.fs))
        except Exception as exc:  # any client error (botocore, google-auth) names the store
            raise self._error(f"cannot read {where}", exc) from None
        out = {}
        for path, entry in entries.items():
            g = got[path]
            if g.data is None:
                raise self._error("cannot read " + path, FileNotFoundError(path))
            if len(g.data) != entry.size or g.sha256 != entry.sha256:
                raise ManifestError(f"{path} does not match its manifest")
            out[entry.name] = g.data
        return out

    def read_to_file(self, manifest: Manifest, name: str, dest: str) -> None:
        """One file of a committed checkpoint streamed into the new local file ``dest``,
        verified against its manifest as it arrives (``fetch_to_file``: memory holds a few
        ranges, never the file); one that does not match is removed and a ManifestError."""
        path = f"{self.manifest_path(manifest)}/{name}"
        entry = manifest.entry(name)
        try:
            got = fetch_to_file(self.fs, path, entry.size, dest)
            if got.sha256 is None:
                raise FileNotFoundError(got.reason or path)
        except Exception as exc:  # any client error names the store
            Path(dest).unlink(missing_ok=True)
            raise self._error("cannot read " + path, exc) from None
        if got.size != entry.size or got.sha256 != entry.sha256:
            Path(dest).unlink(missing_ok=True)
            raise ManifestError(f"{path} does not match its manifest")

    # --- deleting ----------------------------------------------------------
    def delete(self, run_id: str, step: int) -> None:
        """Delete every generation's folder of ``step``."""
        for gen in self._folders(run_id).get(step, {}):
            self.delete_folder(run_id, step, gen)

    def delete_folder(self, run_id: str, step: int, generation: int | None) -> None:
        """Delete ``step``'s folder of ``generation`` (None: an old step-only one)."""
        path = self.write_path(run_id, step, generation)
        try:
            # The manifest goes first: a half-deleted checkpoint must read as uncommitted.
            if self.fs.exists(f"{path}/{MANIFEST_NAME}"):
                self.fs.rm(f"{path}/{MANIFEST_NAME}")
            if self.fs.exists(path):
                self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass
        except Exception as exc:  # any client error (botocore, google-auth) names the store
            raise self._error("cannot delete " + path, exc) from None

    def abort_orphaned_uploads(self, run_id: str, older_than_s: float = 0.0) -> list[str]:
        """Abort S3 multipart uploads under this run's checkpoints (a write cut off
        mid-upload leaves one, billed and invisible); the keys aborted."""
        raw = getattr(self.fs, "unwrapped", self.fs)
        if not hasattr(raw, "list_multipart_uploads"):
            return []
        bucket, _, prefix = f"{self.run_root(run_id)}/".partition("/")
        now = time.time()
        aborted = []
        try:
            for up in raw.list_multipart_uploads(bucket):
                key = str(up.get("Key", ""))
                started = up.get("Initiated")
                age = now - started.timestamp() if hasattr(started, "timestamp") else float("inf")
                if key.startswith(prefix) and age >= older_than_s:
                    raw.abort_mpu(bucket, key, up["UploadId"])
                    aborted.append(key)
        except Exception as exc:  # any client error names the store
            raise self._error("cannot abort multipart uploads under " + prefix, exc) from None
        return aborted

    def retain(
        self,
        run_id: str,
        keep: int,
        lineage: Admits | None = None,
        attempt: int | None = None,
        on_skip: SkipHook | None = None,
    ) -> list[int]:
        """Keep the newest ``keep`` committed checkpoints on the lineage; drop older ones,
        torn leftovers, and (first) every checkpoint the lineage fences, so a zombie's
        newer steps can never push the lineage's own out. A manifest not signed with the
        run's key, or that is not a manifest at all (malformed, too large, not a regular
        file), is neither counted nor deleted (see ``retention_plan``): a foreign entry is
        left alone, and ``on_skip`` is told of it once per store, with the reason. So is
        one written by a later attempt than ``attempt`` (the attempt retaining: a zombie in
        a store its successor could not fence must not prune the successor's). The steps deleted."""
        # Retention counts folders, not steps: two generations' checkpoints of one step are two
        # (a zombie's of step N is fenced and goes first; the lineage's own stays).
        folders = {
            folder_rank(step, gen): ok for step, gens in self._folders(run_id).items() for gen, ok in gens.items()
        }
        fenced: set[tuple[int, int]] = set()
        untrusted: dict[tuple[int, int], str] = {}
        for key in sorted(k for k, ok in folders.items() if ok):
            step, gen = key[0], (None if key[1] < 0 else key[1])
            try:
                m = self.manifest(run_id, step, step_dir_name(step, gen))
            except ManifestError as exc:
                untrusted[key] = f"left alone by retention: {exc}"
                continue
            if m is None:
                continue
            verdict = self.trusts(m)
            if verdict.ok:
                verdict = relabelled(step_dir_name(step, gen), m)
            if not verdict.ok:
                untrusted[key] = f"left alone by retention: {verdict.reason}"
            elif attempt is not None and m.attempt > attempt:
                untrusted[key] = ""  # a successor's own: not foreign, nothing to say
            elif lineage is not None and not lineage.allows(m.attempt, m.step):
                fenced.add(key)
        doomed = retention_plan(folders, keep, fenced, set(untrusted))
        for step, gen in doomed:
            self.delete_folder(run_id, step, None if gen < 0 else gen)
        for (step, gen), reason in sorted(untrusted.items()):
            if reason and on_skip is not None and (run_id, step, gen) not in self._left_alone:
                self._left_alone.add((run_id, step, gen))
                on_skip(step, reason[:500])
        return sorted({step for step, _ in doomed})


def retention_plan(
    steps: dict[K, bool],
    keep: int,
    fenced: set[K] | frozenset[K] = frozenset(),
    untrusted: set[K] | frozenset[K] = frozenset(),
) -> list[K]:
    """What retention deletes, in order: fenced checkpoints first, then all but the newest
    ``keep`` of the others, then folders without manifest older than the newest kept
    commit (torn writes; newer ones may still be in flight, and a zombie's higher steps
    must not make the current attempt's upload look torn).

    ``untrusted``: committed steps whose manifest is not signed with the run's key. They
    never count (a planted step must not push the run's own out) and are never deleted:
    with a wrong or lost key every checkpoint would look planted, and retention must not
    then empty the store.

    ``steps`` maps a step, or a folder's ``folder_rank``, to whether it is committed."""
    committed = sorted(s for s, ok in steps.items() if ok and s not in fenced and s not in untrusted)
    doomed = sorted(s for s in fenced if steps.get(s))
    doomed += committed[:-keep] if keep > 0 else committed
    if committed:
        newest = committed[-1]
        doomed += sorted(s for s, ok in steps.items() if not ok and s < newest)
    return doomed


# s3fs's pipe_file sends an object of two parts or more in parts of this size, and S3
# reports such an object's ETag as the MD5 of its parts' MD5s, "-" and the part count.
MULTIPART_CHUNK = 50 * 2**20


def multipart_etag(data: bytes, chunk: int = MULTIPART_CHUNK) -> str:
    """The ETag S3 gives ``data`` uploaded in parts of ``chunk`` bytes."""
    parts = [hashlib.md5(data[i : i + chunk], usedforsecurity=False).digest() for i in range(0, len(data), chunk)]
    return f"{hashlib.md5(b''.join(parts), usedforsecurity=False).hexdigest()}-{len(parts)}"


def _md5_matches(info: dict[str, Any], data: bytes) -> bool | None:
    """Compare with the store's own MD5 (GCS md5Hash, a single-part S3 ETag, or a
    multipart one cut the way s3fs cuts); None: none given, or parts cut otherwise."""
    import base64

    if info.get("md5Hash"):
        digest = hashlib.md5(data, usedforsecurity=False).digest()
        return str(info["md5Hash"]) == base64.b64encode(digest).decode()
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    if etag and "-" not in etag and len(etag) == 32:
        return etag == hashlib.md5(data, usedforsecurity=False).hexdigest()
    head, _, count = etag.partition("-")
    if len(head) == 32 and count.isdigit():
        if int(count) != -(-len(data) // MULTIPART_CHUNK):
            return None  # another uploader's part size: read it back instead
        return etag == multipart_etag(data, MULTIPART_CHUNK)
    return None


# --- fences in a store (the rule is recovery/fencing.py) ---------------------------------------


# A checkpoint that belongs to a part of a run (a search's trial: ``<run_id>/trials/<trial_id>``)
# sits under the run's folder and is fenced by the run's fence.
PART_OF_RUN = "/trials/"


def part_of(run_id: str, part: str) -> str:
    """The run id a part of a run (a search's trial) commits its checkpoints under."""
    return f"{run_id}{PART_OF_RUN}{part}"


def fence_owner(run_id: str) -> str:
    """The run whose fence fences ``run_id``'s checkpoints: the run itself, or for a part
    of a run (PART_OF_RUN), the run it is part of."""
    return run_id.split(PART_OF_RUN, 1)[0]


def fence_path(store: CheckpointStore, run_id: str) -> str:
    return f"{store.root}/{fence_owner(run_id)}/{FENCE_NAME}"


def read_fence(store: CheckpointStore, run_id: str) -> Lineage | None:
    """The store's fence; None only when it has none. StoreError when it cannot be read
    (a fence we cannot see may hide a newer generation, so it is never taken for no
    fence); FenceRejected, with the reason, when what is there is not a fence this run's
    controller signed (malformed, forged, another run's, not a regular file): one that
    neither raises nor lowers anything."""
    path = fence_path(store, run_id)
    try:
        raw = read_capped(store.fs, path, MAX_FENCE_BYTES)
    except FileNotFoundError:
        return None
    except UnsafeFile as exc:
        raise FenceRejected(f"{FENCE_NAME}: {exc.strerror}") from None
    except TooLarge as exc:
        raise FenceRejected(str(exc)) from None
    except Exception as exc:  # any client error (a timeout, a folder in its place) names the store
        raise store._error("cannot read " + path, exc) from None
    if store.key is None:
        raise FenceRejected("no run key to check the fence's signature")
    return decode_fence(raw, fence_owner(run_id), store.key.fence_verifies)


@dataclass(frozen=True)
class FenceScan:
    """What the stores' fences say: the newest lineage, and the stores that did not answer."""

    newest: Lineage = field(default_factory=Lineage)
    failed: dict[str, str] = field(default_factory=dict)  # region -> error
    # region -> why its fence was ignored (not signed by this run's controller, malformed)
    ignored: dict[str, str] = field(default_factory=dict)

    @property
    def generation(self) -> int:
        return self.newest.generation


def scan_fences(stores: list[CheckpointStore], run_id: str) -> FenceScan:
    """Every store's fence, read once; a store whose fence cannot be read is reported, not skipped silently."""
    best, failed, ignored = Lineage(), {}, {}
    for store in stores:
        try:
            lineage = read_fence(store, run_id)
        except StoreError as exc:
            failed[store.region or store.url] = str(exc)
            continue
        except FenceRejected as exc:
            ignored[store.region or store.url] = str(exc)
            continue
        if lineage is not None and lineage.newer_than(best):
            best = lineage
    return FenceScan(best, failed, ignored)


def newest_fence(stores: list[CheckpointStore], run_id: str) -> Lineage:
    """The lineage with the highest generation among the stores that answer."""
    return scan_fences(stores, run_id).newest
