"""Authenticated checkpoints: only a manifest signed for its generation is trusted.

A manifest's sha256 digests say that the files are the ones the manifest names, not
who wrote it: anyone who can write to one candidate store could plant a higher step
that wins the restore. So every manifest carries an HMAC-SHA256 over its canonical
form (``Manifest.signed_bytes``: files with names, sizes and digests, step, attempt,
run_id, region, extra, version, commit time; sorted-key JSON without the signature),
under the key of the generation that wrote it (``manifest.attempt``).

The key chain, kept short on purpose:

- the run's **secret**: 32 random bytes made once per run by the controller, kept in
  ``<home>/runs/<run_id>/run.secret`` (mode 0600) on the controller's machine;
  ``action=resume`` reads the same file. It is never written to a store, a log, the
  journal, config.json, a runtime spec, a checkpoint or an event;
- with a **control key** (``cloud.control_key``: a key the user holds, from an
  environment variable, a file or a command), the secret is instead
  ``HMAC-SHA256(control key, "orchestrator run secret v1\\0" + run_id)``: a controller on
  another machine given the same key has the run's secret again, and nothing of it is in
  any store. The run's mirror and its controller lease in the control store
  (orchestrator/control/mirror.py, lease.py) are authenticated under
  ``HMAC-SHA256(secret, "orchestrator control state v1\\0" + run_id)``;
- the **generation keys** and the **fence key pair** (recovery/keys.py): attempt ``g``
  gets ``K_g``, from which it derives the keys of earlier generations and of no later
  one, and the fence public key, in its driver's environment (``ORCHESTRATOR_RUN_KEY``;
  see orchestrator/wire/runkey.py). A zombie can therefore neither sign a checkpoint
  as its successor nor forge a fence;
- the run's **cluster token key**: ``HMAC-SHA256(secret, "orchestrator ray token v1\\0" +
  run_id)``, from which a provider derives each remote cluster's Ray token
  (``cluster_token``), so that a controller resumed after a crash can talk to the
  clusters it finds again. It stays in the controller's process.

Restore, replication and retention trust a manifest only when its signature verifies
(``hmac.compare_digest``); a missing or wrong one is treated like a checkpoint whose
files do not verify: skipped with its reason, never copied, never counted. Listing
needs no key: tools that inspect stores still see every committed step.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import replace

from recovery.fsio import open_regular
from recovery.keys import AttemptKeys, controller_keys
from recovery.manifest import FORMAT_VERSION, Manifest, Verdict

SECRET_FILE = "run.secret"
SECRET_BYTES = 32
_TOKEN_LABEL = b"orchestrator ray token v1\0"
_SECRET_LABEL = b"orchestrator run secret v1\0"
_STATE_LABEL = b"orchestrator control state v1\0"

UNSIGNED = "unsigned: not written by this run (or written before checkpoints were signed)"
FORGED = "signature does not verify: not written by this run"
NO_KEY = "no run key to check its signature"
LATER = "written by a later generation than this attempt's keys reach"
OLD_FORMAT = "signed under the run-wide key of an earlier release: not trusted"


class SigningError(RuntimeError):
    """A checkpoint cannot be signed, or the run's secret cannot be had; one line."""


def secret_from_key(control_key: bytes, run_id: str) -> bytes:
    """The run's secret when the user holds a control key: the same on any machine given it."""
    return hmac.new(control_key, _SECRET_LABEL + run_id.encode(), hashlib.sha256).digest()


def derive_state_key(secret: bytes, run_id: str) -> bytes:
    """What authenticates the run's state in the control store (its mirror and lease)."""
    return hmac.new(secret, _STATE_LABEL + run_id.encode(), hashlib.sha256).digest()


def derive_token_key(secret: bytes, run_id: str) -> bytes:
    return hmac.new(secret, _TOKEN_LABEL + run_id.encode(), hashlib.sha256).digest()


def cluster_token(token_key: bytes, cluster_name: str) -> str:
    """The Ray token of the cluster named ``cluster_name`` (names are unique per attempt)."""
    return hmac.new(token_key, cluster_name.encode(), hashlib.sha256).hexdigest()


def signature_of(manifest: Manifest, key: bytes) -> str:
    return hmac.new(key, manifest.signed_bytes(), hashlib.sha256).hexdigest()


def signed(manifest: Manifest, keys: AttemptKeys) -> Manifest:
    """``manifest`` signed with its generation's key; SigningError when these keys cannot
    reach that generation (an attempt signs for itself and earlier ones, never later)."""
    key = keys.generation_key(manifest.attempt)
    if key is None:
        raise SigningError(f"generation {manifest.attempt}: beyond these keys (generation {keys.generation})")
    return replace(manifest, signature=signature_of(manifest, key))


def check(manifest: Manifest, keys: AttemptKeys | None) -> Verdict:
    """Whether ``manifest`` was signed for its generation by this run: the trust decision on a checkpoint."""
    if keys is None:
        return Verdict(False, NO_KEY)
    if not manifest.signature:
        return Verdict(False, UNSIGNED)
    if manifest.version < FORMAT_VERSION:
        return Verdict(False, OLD_FORMAT)
    key = keys.generation_key(manifest.attempt)
    if key is None:
        return Verdict(False, LATER)
    if not hmac.compare_digest(manifest.signature.encode(), signature_of(manifest, key).encode()):
        return Verdict(False, FORGED)
    return Verdict(True)


def run_keys_of(run_dir: str) -> AttemptKeys:
    """Every key of the run whose folder is ``run_dir`` (its secret must exist): for tools
    and tests that check a finished run's checkpoints."""
    path = os.path.join(run_dir, SECRET_FILE)
    return controller_keys(_read_secret(path), os.path.basename(os.path.normpath(run_dir)))


def secret_of(run_dir: str) -> bytes:
    """The run's secret from its folder, which must hold one (SigningError otherwise); creates nothing."""
    return _read_secret(os.path.join(run_dir, SECRET_FILE))


def load_or_create_secret(run_dir: str, derived: bytes | None = None) -> tuple[bytes, bool]:
    """The run's secret from ``run_dir/run.secret``, made (0600, exclusively) when there is
    none, as ``derived`` (from the user's control key) or else random; (secret, created:
    a random one made now). SigningError, one line naming the file, when it is readable
    by others or not SECRET_BYTES long: a secret others could read authenticates nothing."""
    path = os.path.join(run_dir, SECRET_FILE)
    os.makedirs(run_dir, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return _read_secret(path), False
    secret = derived if derived is not None else secrets.token_bytes(SECRET_BYTES)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask said
        os.write(fd, secret)
        os.fsync(fd)
    finally:
        os.close(fd)
    return secret, derived is None


def _read_secret(path: str) -> bytes:
    try:
        # A regular file only, never through a link or waiting on a FIFO; a byte more than
        # a secret's is enough to tell a wrong one.
        fd = open_regular(path, os.O_RDONLY)
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
            if mode & 0o077:
                raise SigningError(f"{path}: readable by others (mode {mode:o}); chmod 600 it")
            secret = os.read(fd, SECRET_BYTES + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise SigningError(f"{path}: cannot read the run's secret: {exc.strerror or exc}") from None
    if len(secret) != SECRET_BYTES:
        size = f"{len(secret)} bytes" if len(secret) < SECRET_BYTES else f"more than {SECRET_BYTES} bytes"
        raise SigningError(f"{path}: damaged ({size}, expected {SECRET_BYTES})")
    return secret
