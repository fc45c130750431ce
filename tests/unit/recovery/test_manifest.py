"""A manifest read from a store is parsed totally: every malformed one is a ManifestError."""

from __future__ import annotations

import json

import pytest

from recovery.manifest import FileEntry, Manifest, ManifestError

pytestmark = pytest.mark.unit
GOOD = Manifest("run", 5, 1, (FileEntry("model.pt", 3, "a" * 64),), 1.0, region="r")


def _with(**changes: object) -> bytes:
    d = json.loads(GOOD.to_json())
    d.update(changes)
    return json.dumps(d).encode()


def test_a_good_manifest_round_trips() -> None:
    assert Manifest.from_json(GOOD.to_json()) == GOOD


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 10_000,
        b'{"step": 1e999}',
        _with(step="5"),
        _with(step=True),
        _with(step=-1),
        _with(step=2**70),
        _with(attempt=1.5),
        _with(committed_at="now"),
        _with(files={"a": 1}),
        _with(files=[{"name": "model.pt", "size": 3, "sha256": "not hex"}]),
        _with(files=[{"name": "../x", "size": 3, "sha256": "a" * 64}]),
        _with(files=[{"name": "model.pt", "size": -3, "sha256": "a" * 64}]),
        _with(extra=[1]),
        _with(run_id=None),
        _with(signature=5),
        b"[]",
        b"\xff",
        b"",
    ],
)
def test_malformed_manifests_are_one_error(raw: bytes) -> None:
    with pytest.raises(ManifestError):
        Manifest.from_json(raw)
