"""The documentation site builds with ``mkdocs build --strict``: a broken link, a missing
page or an entry point mkdocstrings cannot render fails it. On the pages made from the
code, nothing written as ``<name>`` is swallowed as an HTML tag, and the API page lists
each dataclass's fields."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.runs import skip_unless_strict

pytestmark = pytest.mark.integration


# Every element the site's pages are made of (HTML's, and the theme's inline SVG): any other
# tag name in a page is text that Markdown took for a tag, such as cloud.regions.<name>.
HTML_ELEMENTS = set(
    """a abbr address article aside audio b blockquote body br button caption code col colgroup dd del
    details div dl dt em figcaption figure footer form h1 h2 h3 h4 h5 h6 head header hr html i iframe img
    input ins kbd label legend li link main mark meta nav noscript ol optgroup option p picture pre q s
    samp script section select small source span strong style sub summary sup table tbody td template
    textarea tfoot th thead time title tr u ul var video wbr svg path g circle rect line polyline polygon
    defs use symbol""".split()
)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.names.add(tag)


def _tags(html: str) -> set[str]:
    parser = _Tags()
    parser.feed(html)
    return parser.names


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("mkdocs") is None:
        skip_unless_strict("mkdocs is not installed: pip install -c constraints.txt -e '.[docs]'")
    site = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return site


def test_the_docs_build_strictly(site: Path) -> None:
    assert (site / "reference" / "config" / "index.html").exists()
    assert "CheckpointStore" in (site / "reference" / "api" / "index.html").read_text()
    assert (site / "images" / "incident-report.png").exists()


@pytest.mark.parametrize("page", ["api", "config", "result-json", "events", "fault-kinds", "cli"])
def test_no_name_in_angle_brackets_is_swallowed_as_a_tag(site: Path, page: str) -> None:
    html = (site / "reference" / page / "index.html").read_text()
    assert sorted(_tags(html) - HTML_ELEMENTS) == []
    if page in ("api", "config"):
        # RegionConfig's docstring, written as plain text: shown, not taken for a tag.
        assert "cloud.regions.&lt;name&gt;), for every provider" in html


def test_each_dataclass_on_the_api_page_lists_its_fields(site: Path) -> None:
    html = (site / "reference" / "api" / "index.html").read_text()
    headings = set(re.findall(r'<h\d id="([\w.]+)" class="doc doc-heading"', html))
    shown: list[str] = []
    missing: list[str] = []
    for path in sorted(headings):
        module_name, _, name = path.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError, ValueError):
            continue  # a field, a method or a module: not a class of a module
        if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
            continue
        shown.append(name)
        missing += [f"{path}.{f.name}" for f in dataclasses.fields(obj) if f"{path}.{f.name}" not in headings]
    assert {"Config", "RegionConfig", "FsdpConfig", "RunRecord", "RegionSpec", "Lease"} <= set(shown)
    assert missing == []
    # A field's comment is its description on the page.
    assert "Per node: the head and each worker node offer num_cpus CPUs and num_gpus GPUs." in html
