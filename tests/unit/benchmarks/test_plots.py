"""benchmarks/plots.py draws each picture from the benchmarks' JSON, the same bytes each time,
and skips (saying so) a picture whose JSON is not there."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.unit
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def plots() -> Any:
    """benchmarks.plots, imported by the tests that draw (matplotlib takes a while to import)."""
    from benchmarks import plots

    return plots


def test_every_picture_is_drawn_from_its_json_and_drawn_again_the_same(tmp_path: Path, plots: Any) -> None:
    for src in (REPO / "docs" / "benchmarks").glob("*.json"):
        shutil.copy(src, tmp_path / src.name)
    plots.main(["--dir", str(tmp_path)])
    pngs = sorted(tmp_path.glob("*.png"))
    assert {p.name for p in pngs} == {p.name for p in (REPO / "docs" / "benchmarks").glob("*.png")}
    first = {p.name: p.read_bytes() for p in pngs}
    assert all(data.startswith(PNG) and len(data) > 1000 for data in first.values())
    plots.main(["--dir", str(tmp_path)])
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.png")} == first


def test_a_missing_json_is_skipped_and_said(tmp_path: Path, capsys: pytest.CaptureFixture[str], plots: Any) -> None:
    plots.main(["--dir", str(tmp_path)])
    assert list(tmp_path.glob("*.png")) == []
    assert "skipped: no" in capsys.readouterr().out
