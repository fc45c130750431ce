"""The manifest: member names stay inside their folder; parse round trip; judge()."""

from __future__ import annotations

import json

import pytest

from recovery.manifest import FileEntry, Manifest, ManifestError, check_member_name, judge

SHA_A = "a" * 64
SHA_B = "b" * 64


def manifest() -> Manifest:
    return Manifest(
        run_id="run-1",
        step=40,
        attempt=2,
        files=(FileEntry("model.pt", 10, SHA_A), FileEntry("sub/dir/opt.pt", 3, SHA_B)),
        committed_at=1700000000.25,
        region="local-a",
        extra={"world_size": 2, "replica_of": "local-b"},
    )


@pytest.mark.parametrize(
    "name",
    ["../x", "/etc/passwd", "a/../../b", "s3://other/x", "", "MANIFEST.json", "a\\b", "./x", "a//b", "a/"],
)
def test_member_name_outside_the_checkpoint_folder_is_rejected(name: str) -> None:
    with pytest.raises(ManifestError):
        check_member_name(name)


@pytest.mark.parametrize("name", ["model.pt", "sub/dir/file", "rng-rank0.pt"])
def test_member_name_inside_the_folder_is_accepted(name: str) -> None:
    check_member_name(name)


def test_manifest_survives_a_json_round_trip_from_text_and_bytes() -> None:
    m = manifest()
    assert Manifest.from_json(m.to_json()) == m
    assert Manifest.from_json(m.to_json().encode()) == m


@pytest.mark.parametrize(
    "text",
    ["{", "", "null", "[]", '"text"', '{"run_id": "r"}', b"\xff\xfe"],
    ids=["truncated", "empty", "null", "list", "string", "missing-fields", "not-utf8"],
)
def test_malformed_manifest_raises_manifest_error(text: str | bytes) -> None:
    with pytest.raises(ManifestError):
        Manifest.from_json(text)


def test_manifest_with_a_non_numeric_size_raises_manifest_error() -> None:
    d = json.loads(manifest().to_json())
    d["files"][0]["size"] = "big"
    with pytest.raises(ManifestError):
        Manifest.from_json(json.dumps(d))


def test_manifest_naming_a_file_outside_its_folder_raises_manifest_error() -> None:
    d = json.loads(manifest().to_json())
    d["files"][0]["name"] = "../x"
    with pytest.raises(ManifestError, match=r"\.\./x"):
        Manifest.from_json(json.dumps(d))


def test_judge_accepts_files_that_match() -> None:
    assert judge(manifest(), {"model.pt": (10, SHA_A), "sub/dir/opt.pt": (3, SHA_B)}).ok


def test_judge_rejects_a_missing_file_and_names_it() -> None:
    v = judge(manifest(), {"model.pt": (10, SHA_A)})
    assert not v.ok
    assert "sub/dir/opt.pt is missing" in v.reason


def test_judge_rejects_a_size_mismatch_and_gives_both_sizes() -> None:
    v = judge(manifest(), {"model.pt": (9, None), "sub/dir/opt.pt": (3, SHA_B)})
    assert not v.ok
    assert "model.pt has 9 bytes, manifest says 10" in v.reason


def test_judge_rejects_a_sha256_mismatch() -> None:
    v = judge(manifest(), {"model.pt": (10, SHA_A), "sub/dir/opt.pt": (3, SHA_A)})
    assert not v.ok
    assert "sub/dir/opt.pt sha256 mismatch" in v.reason


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
