"""Preflight (orchestrator/config/preflight.py): a store that cannot be reached names the key at fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.preflight import PreflightError, probe

pytestmark = pytest.mark.unit


class FailingFs:
    protocol = "s3"
    async_impl = False

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def pipe_file(self, path: str, data: bytes, **kw: object) -> None:
        raise self.exc


@pytest.mark.parametrize(
    ("exc", "options", "key"),
    [
        (ConnectionRefusedError("refused"), {"endpoint_url": "http://127.0.0.1:9"}, "R.storage_options.endpoint_url"),
        (TypeError("unexpected keyword argument 'bogus'"), {"bogus": 1}, "R.storage_options"),
        (PermissionError("denied"), {"endpoint_url": "http://127.0.0.1:9"}, "R.store"),
        (ConnectionRefusedError("refused"), {}, "R.store"),
    ],
)
def test_preflight_blames_the_options_or_the_url(
    monkeypatch: pytest.MonkeyPatch, exc: Exception, options: dict[str, object], key: str
) -> None:
    import orchestrator.config.preflight as pf

    monkeypatch.setattr(pf, "open_fs", lambda url, opts: (FailingFs(exc), "b/x"))
    with pytest.raises(PreflightError) as info:
        probe("R.store", "R.storage_options", "s3://b/x", options)
    assert str(info.value).startswith(f"{key}: ")


def test_preflight_of_a_store_under_a_file_names_the_store(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(PreflightError) as info:
        probe("R.store", "R.storage_options", f"file://{tmp_path}/f/store", {})
    assert str(info.value).startswith("R.store: ")


# --- a takeover's stores ------------------------------------------------------------------------


def test_a_control_store_with_stores_only_this_machine_reaches_is_said_once_naming_the_setting(
    tmp_path: Path,
) -> None:
    from orchestrator.config.compose import compose
    from orchestrator.config.preflight import takeover_warning

    local = compose([f"home={tmp_path}", f"cloud.control_store=file://{tmp_path}/control"])
    line = takeover_warning(local, lambda path: "ext4")
    assert line is not None and line.startswith("warning: cloud.control_store is set") and "\n" not in line
    assert "cloud.control_store, cloud.regions.local-a.store, cloud.regions.local-b.store" in line
    assert "(ext4)" in line and "cloud.regions.<name>.store" in line and "s3://" in line
    # A shared mount (NFS, a bucket through FUSE) may reach the other machine: no word.
    assert takeover_warning(local, lambda path: "nfs4") is None
    assert takeover_warning(local, lambda path: "fuse.s3fs") is None
    assert takeover_warning(local, lambda path: None) is None  # cannot be told
    assert takeover_warning(compose([f"home={tmp_path}"]), lambda path: "ext4") is None  # no control store
    # Object stores everywhere: nothing only this machine reaches.
    s3 = [f"cloud.regions.{r}.store=s3://bucket/{r}" for r in ("local-a", "local-b", "local-c")]
    remote = compose([f"home={tmp_path}", "cloud.control_store=s3://bucket/control", *s3])
    assert takeover_warning(remote, lambda path: "ext4") is None


def test_the_mount_that_holds_a_path_is_its_longest_mount_point(tmp_path: Path) -> None:
    from orchestrator.config.preflight import mount_type

    table = tmp_path / "mounts"
    table.write_text(
        "overlay / overlay rw 0 0\n"
        "server:/export /mnt/shared nfs4 rw 0 0\n"
        "tmpfs /mnt/shared/scratch tmpfs rw 0 0\n"
        "server:/b /mnt/with\\040space nfs rw 0 0\n"
    )
    assert mount_type("/mnt/shared/x/y", str(table)) == "nfs4"
    assert mount_type("/mnt/shared/scratch/z", str(table)) == "tmpfs"
    assert mount_type("/mnt/sharedother", str(table)) == "overlay"
    assert mount_type("/mnt/with space/q", str(table)) == "nfs"
    assert mount_type("/x", str(tmp_path / "none")) is None
