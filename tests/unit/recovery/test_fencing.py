"""Fences are accepted only when this run's controller signed them for this run."""

from __future__ import annotations

import json

import pytest

from recovery.fencing import FenceRejected, Lineage, decode_fence, encode_fence
from recovery.keys import controller_keys

pytestmark = pytest.mark.unit
CTL = controller_keys(bytes(32), "run")
ATTEMPT = CTL.for_attempt(2)
LINEAGE = Lineage().then(1, 0).then(2, 40)


def test_a_signed_fence_reads_back() -> None:
    assert decode_fence(encode_fence("run", LINEAGE, CTL.sign_fence), "run", ATTEMPT.fence_verifies) == LINEAGE


def _forged(**changes: object) -> bytes:
    d = json.loads(encode_fence("run", LINEAGE, CTL.sign_fence))
    d.update(changes)
    return json.dumps(d).encode()


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (_forged(links=[[1, 0], [2, 40], [99, 0]]), "does not verify"),
        (_forged(signature=""), "unsigned"),
        (json.dumps({"links": [[9, 0]]}).encode(), "unsigned"),
        (_forged(run_id="other"), "another run"),
        (encode_fence("run", LINEAGE, controller_keys(bytes(range(32)), "run").sign_fence), "does not verify"),
        (b"[" * 100_000, "malformed"),
        (b'{"links": [[1e999, 0]]}', "malformed"),
        (b'{"links": [[2, 0], [1, 0]]}', "malformed"),
        (b"\x00\x01", "malformed"),
    ],
)
def test_a_fence_this_controller_did_not_sign_is_rejected_with_its_reason(raw: bytes, why: str) -> None:
    with pytest.raises(FenceRejected, match=why):
        decode_fence(raw, "run", ATTEMPT.fence_verifies)
