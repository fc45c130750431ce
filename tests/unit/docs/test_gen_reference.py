"""The reference pages made from the code: every key, kind, event and field is on its
page, and the committed pages are what the code makes now."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.unit


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being made
    spec.loader.exec_module(module)
    return module


GEN = _generator()


def _page(name: str) -> str:
    return (REPO / "docs" / "reference" / name).read_text()


def test_the_committed_pages_are_what_the_code_makes() -> None:
    assert GEN.stale() == [], "run: python docs/gen_reference.py, and commit the pages"


def test_every_key_of_every_schema_dataclass_is_on_the_config_page() -> None:
    from orchestrator.config import schema

    keys = set(re.findall(r"^\| `([^`]+)` \|", _page("config.md"), re.MULTILINE))
    leaves = {k.rsplit(".", 1)[-1] for k in keys}
    classes = [c for _, c in inspect.getmembers(schema, dataclasses.is_dataclass) if c.__module__ == schema.__name__]
    assert {"Config", "RegionConfig", "FaultConfig", "RandomTrigger"} <= {c.__name__ for c in classes}
    missing = [
        f"{c.__name__}.{f.name}"
        for c in classes
        for f in dataclasses.fields(c)
        if f.name not in leaves and not dataclasses.is_dataclass(f.default_factory)  # a section: its own table
    ]
    assert missing == [], f"config keys missing from docs/reference/config.md: {missing}"
    wanted = {"trainer.workers", "cloud.regions.<name>.store", "chaos.faults[].kind", "chaos.faults[].random.rate"}
    assert wanted <= keys


def test_every_fault_kind_event_type_and_result_field_is_on_its_page() -> None:
    from orchestrator.runstate.events import EVENT_TYPES
    from orchestrator.wire.faults import FaultKind
    from orchestrator.wire.schema import EVENT_KINDS

    faults, events, result = _page("fault-kinds.md"), _page("events.md"), _page("result-json.md")
    assert [k for k in FaultKind if f"| `{k.value}` |" not in faults] == []
    assert [t for t in EVENT_TYPES if f"| `{t}` |" not in events] == []
    assert [k for k in EVENT_KINDS if f"`runtime.{k}`" not in events] == []
    fields = [name for name, _, _ in GEN.result_fields()]
    assert {"run_id", "status", "weights_sha256", "incidents", "best_trial", "duration_s"} <= set(fields)
    assert [f for f in fields if f"| `{f}` |" not in result] == []


def test_a_comment_above_a_field_and_one_at_its_end_both_describe_it() -> None:
    @dataclasses.dataclass
    class Example:
        # Above,
        # on two lines.
        a: int = 1  # and at the end.

        b: str = ""  # only here

        c: float = 0.0

    comments = GEN.class_comments(Example)
    assert comments == {"a": "Above, on two lines. and at the end.", "b": "only here", "c": ""}


def _group_rows() -> dict[str, tuple[list[str], str]]:
    """cli.md's config groups table: group -> (the options it names, what it sets)."""
    rows = {}
    for line in _page("cli.md").splitlines():
        if m := GEN._GROUP_ROW.match(line):
            rows[m.group(1)] = (re.findall(r"`([^`]+)`", m.group(2)), m.group(3).strip())
    return rows


def test_the_command_line_page_names_every_job_in_conf_job() -> None:
    jobs = sorted(p.stem for p in (REPO / "conf" / "job").glob("*.yaml"))
    assert {"digits", "gpt_xl"} <= set(jobs)
    assert sorted(_group_rows()["job"][0]) == jobs, "run: python docs/gen_reference.py"


def test_the_command_line_page_has_a_described_row_for_every_group_with_each_option() -> None:
    rows = _group_rows()
    for group, options in GEN._groups():
        assert group in rows, f"docs/reference/cli.md has no row for conf/{group}/: run python docs/gen_reference.py"
        named, what = rows[group]
        assert sorted(named) == options, f"cli.md's conf/{group}/ options: run python docs/gen_reference.py"
        assert what, f"cli.md's conf/{group}/ row: say what the group sets, in its last column"
    assert set(rows) == {g for g, _ in GEN._groups()}


def test_the_command_line_page_names_every_action() -> None:
    from orchestrator.config.schema import Action

    page = _page("cli.md")
    top = page.split("Top-level keys: `action` (", 1)[1].split(")", 1)[0]
    assert sorted(re.findall(r"`(\w+)`", top)) == sorted(a.value for a in Action)


def test_the_groups_table_puts_the_default_first_and_follows_conf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert GEN.group_options("job", ["a", "digits", "z"], "digits") == "`digits` (default), `a`, `z`"
    assert GEN.group_options("recovery", ["default", "warm"], "default") == "`default`, `warm`"
    page = (
        f"# T\n\n{GEN.GROUPS_BEGIN}\n\n| group | options | what it sets |\n|---|---|---|\n"
        "| `old/` | `x` | gone |\n| `job/` | `a` | the job |\n\n"
        f"{GEN.GROUPS_END}\n\nAfter.\n"
    )
    (tmp_path / "cli.md").write_text(page)
    monkeypatch.setattr(GEN, "OUT", tmp_path)
    monkeypatch.setattr(GEN, "_groups", lambda: [("job", ["a", "b"]), ("new", ["n"])])
    monkeypatch.setattr(GEN, "_default_options", lambda: {"job": "b"})
    made = GEN.cli_page()
    assert "| `job/` | `b` (default), `a` | the job |\n| `new/` | `n` |  |\n\n" in made
    assert "old" not in made and made.startswith("# T\n\n") and made.endswith(f"{GEN.GROUPS_END}\n\nAfter.\n")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("cloud.regions.<name>.store", "cloud.regions.&lt;name&gt;.store"),
        ("under <home>/runs/<run_id>/x", "under &lt;home&gt;/runs/&lt;run_id&gt;/x"),
        ('"slurm/<cluster in ~/.slurm/config>"', '"slurm/&lt;cluster in ~/.slurm/config&gt;"'),
        ("`cloud.regions.<name>` and ``<a> `b` <c>``", "`cloud.regions.<name>` and ``<a> `b` <c>``"),
        ("a < b, b > c, 1<2, <- x, <!-- y", "a < b, b > c, 1<2, <- x, &lt;!-- y"),
        ("an open <tag and no end", "an open &lt;tag and no end"),
    ],
)
def test_what_markdown_would_take_for_html_is_escaped_outside_code_spans(text: str, shown: str) -> None:
    assert GEN.escape_tags(text) == shown


def test_no_generated_page_has_a_bare_tag_outside_code_spans() -> None:
    for name in GEN.PAGES:
        for line in _page(name).splitlines():
            if line.startswith("<!--") and line.endswith("-->"):
                continue  # the generator's own notes, comments on purpose
            prose = GEN._CODE_SPAN.sub("", line)
            assert not re.search(r"<[A-Za-z/!?]", prose), f"docs/reference/{name}: {line}"
