"""One reason for a rank's failed read of a chosen checkpoint, said alike by both restores."""

from __future__ import annotations

import pytest

from orchestrator.runtime.checkpoint.restore_failure import READ_ERRORS, restore_failure
from recovery.manifest import ManifestError
from recovery.store import StoreError

pytestmark = pytest.mark.unit


def test_a_bad_file_and_an_unreadable_store_are_each_one_line_naming_the_rank() -> None:
    assert restore_failure(ManifestError("shard-r1.pt does not match its manifest\ndetail"), 1) == (
        "failed verification while restoring (rank 1): shard-r1.pt does not match its manifest"
    )
    assert restore_failure(StoreError("store down"), 0) == "could not be read while restoring (rank 0): store down"
    assert restore_failure(StoreError(""), 2).endswith("(rank 2): StoreError")
    assert set(READ_ERRORS) == {ManifestError, StoreError}
