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
