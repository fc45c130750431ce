"""Why a rank could not take a file of the checkpoint its group chose: one line, said the
same by a restore from the store (``WorkerAttempt.restore_agreed``) and one from peers
(``GroupRecovery``), so the group passes over that checkpoint together with one reason."""

from __future__ import annotations

from recovery.manifest import ManifestError
from recovery.store import StoreError

# What a rank's read of a checkpoint raises that sends its group to the next one.
READ_ERRORS = (ManifestError, StoreError)


def restore_failure(exc: BaseException, rank: int) -> str:
    """``exc`` (one of READ_ERRORS) as the skip's reason: a file that does not verify, or
    a store that cannot be read there now (the next checkpoint may be elsewhere)."""
    first = (str(exc).splitlines() or [type(exc).__name__])[0][:500]
    if isinstance(exc, ManifestError):
        return f"failed verification while restoring (rank {rank}): {first}"
    return f"could not be read while restoring (rank {rank}): {first}"
