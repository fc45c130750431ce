"""The README's two set-up commands are the ones CI and users run, and every figure it quotes
names the benchmark or the run it comes from (the rule is below)."""

from __future__ import annotations

import json
import re

from tests.support.paths import REPO


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    blocks = section.split("```")[1::2]
    return [b.strip() for b in blocks]


def test_readme_has_an_install_and_run_command_and_a_test_command() -> None:
    install, test = _readme_commands()[:2]
    assert "pip install" in install and "-m orchestrator job=digits" in install
    assert "pip install" in test and "-m pytest" in test


def test_ci_runs_the_readme_test_command() -> None:
    test = _readme_commands()[1]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert test in [line.strip() for line in ci], ".ci/run must call the README's test command verbatim"


def test_install_uses_the_constraints_file_that_pins_torch_without_a_local_label() -> None:
    for cmd in _readme_commands()[:2]:
        assert "-c constraints.txt" in cmd
    pins = (REPO / "constraints.txt").read_text().splitlines()
    # No "+cpu": a stock index serves torch 2.13.0 under that name (its CUDA build on
    # Linux); an index or wheel folder with the CPU build's 2.13.0+cpu wins where present.
    assert [p for p in pins if p.startswith("torch==")] == ["torch==2.13.0"]
    assert not any(p.startswith(("nvidia-", "triton")) for p in pins), "a CUDA torch's pins crept in"


# Every figure the README quotes says where it comes from, so that a rerun benchmark or a
# changed default cannot leave the README saying something nobody measured.
#
# A figure is a number in the README's prose or tables (code blocks and code spans are
# commands, not figures; a code block's comments may hold none) that is:
#   - a duration: a number or range with s, ms or min ("0.31 s", "25-40 s", "1.8-3.1 s");
#   - a multiple: a number or range with x ("8x", "0.07x", "0.5-0.75x");
#   - a size or share: a number or range with KB, MB, GB or % ("1.2 GB");
#   - a ratio: a bare number with a decimal point ("0.06", "0.50 of DDP's"), except a
#     version, a number right after a product's name ("Ray 2.60").
# Whole numbers without a unit (step 60, two nodes, 8 trials) are settings, not figures.
#
# A figure's block is the paragraph it sits in; a table's is the table and the paragraph
# right above it. A block with a figure names where it comes from, one of:
#   - a benchmark: a code span naming an existing `benchmarks/<name>.py`, with the
#     arguments it ran with (none: its defaults), or an existing docs/benchmarks/<name>.json;
#   - a run: a code span with a `job=<name>` of conf/job/, and the machine ("2-core machine").
# A block that names docs/benchmarks/<name>.json has each of its figures (bar sizes) in
# that file: each end of a range is one of its numbers rounded as written ("0.31" is
# 0.309; a figure in ms is a number of seconds times 1000).

_NUM = r"\d+(?:\.\d+)?"
_FIGURE = re.compile(
    rf"(?<![\w.\-/])(?P<value>{_NUM}(?:-{_NUM})?)"
    r"(?:(?P<unit> ?(?:ms|s|min|KB|MB|GB|%)(?![\w])|x(?![\w]))|(?![\w.\-%]))"
)
_VERSIONED = ("Ray ", "torch ", "Python ", "SkyPilot ", "Optuna ")
_CODE_SPAN = re.compile(r"(`+).+?(?<!`)\1(?!`)", re.DOTALL)
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_BENCHMARK = re.compile(r"`(?:python )?benchmarks/(\w+)\.py(?: [^`]*)?`")
_JSON = re.compile(r"docs/benchmarks/([\w-]+)\.json")
_JOB = re.compile(r"`[^`]*\bjob=(\w+)[^`]*`")
_MACHINE = re.compile(r"\b\d+-core\s+machine\b")


def _blocks(text: str) -> tuple[list[str], list[str]]:
    """(the README's blocks of prose and tables, the comments of its code blocks)."""
    parts = text.split("```")
    prose, comments = parts[::2], parts[1::2]
    blocks: list[str] = []
    for part in prose:
        for block in re.split(r"\n\s*\n", part):
            if block.lstrip().startswith("|") and blocks and not blocks[-1].lstrip().startswith("#"):
                blocks[-1] += "\n" + block  # a table goes with the paragraph that introduces it
            else:
                blocks.append(block)
    said = [line.split(" # ", 1)[1] for block in comments for line in block.splitlines() if " # " in line]
    return [b for b in blocks if b.strip() and not b.lstrip().startswith("#")], said


def figures(block: str) -> list[tuple[str, str]]:
    """The figures of a block: (number or range as written, unit: "" for a ratio)."""
    prose = " ".join(_LINK_TARGET.sub("]", _CODE_SPAN.sub(" ", block)).split())  # lines joined: "Ray\n2.60"
    found = []
    for m in _FIGURE.finditer(prose):
        value, unit = m.group("value"), (m.group("unit") or "").strip()
        if m.group(0).endswith("x") and not unit:
            unit = "x"
        if not unit and "." not in value:
            continue  # a whole number without a unit: a setting
        if not unit and prose[: m.start()].endswith(_VERSIONED):
            continue
        found.append((value, unit))
    return found


def sources(block: str) -> tuple[list[str], list[str], bool]:
    """(benchmark scripts named, JSON files named, whether it names a run: a job and the machine)."""
    scripts = _BENCHMARK.findall(block)
    files = _JSON.findall(block)
    jobs = [j for j in _JOB.findall(block) if (REPO / "conf" / "job" / f"{j}.yaml").is_file()]
    return scripts, files, bool(jobs and _MACHINE.search(block))


def _numbers(data: object) -> list[float]:
    if isinstance(data, bool) or data is None or isinstance(data, str):
        return []
    if isinstance(data, int | float):
        return [float(data)]
    if isinstance(data, dict):
        return [n for v in data.values() for n in _numbers(v)]
    if isinstance(data, list):
        return [n for v in data for n in _numbers(v)]
    return []


def held_by(figure: str, unit: str, numbers: list[float]) -> bool:
    """Whether each end of ``figure`` is one of ``numbers`` rounded as written."""
    scale = 1000.0 if unit == "ms" else 1.0
    for end in re.findall(_NUM, figure):
        places = len(end.split(".", 1)[1]) if "." in end else 0
        if not any(f"{n * scale:.{places}f}" == end for n in numbers):
            return False
    return True


def _readme_blocks() -> tuple[list[str], list[str]]:
    return _blocks((REPO / "README.md").read_text())


def test_the_rule_finds_figures_and_leaves_settings_and_versions() -> None:
    block = (
        "Ray 2.60's controller, `--steps 2000`, step 60 on two nodes: 0.31 s, 25-40 s, 8x and"
        " 0.5-0.75x, 0.50 of it, 1.2 GB, 0.08%, 6.5 ms ([link](docs/a-1.5.md)); 2-core, v2"
    )
    assert figures(block) == [
        ("0.31", "s"),
        ("25-40", "s"),
        ("8", "x"),
        ("0.5-0.75", "x"),
        ("0.50", ""),
        ("1.2", "GB"),
        ("0.08", "%"),
        ("6.5", "ms"),
    ]
    assert held_by("0.31", "s", [0.309]) and held_by("8", "x", [8.124]) and held_by("6.5", "ms", [0.0065])
    assert not held_by("0.31", "s", [0.32]) and not held_by("0.5-0.75", "x", [0.7502])


def test_every_figure_names_the_benchmark_or_the_run_it_comes_from() -> None:
    blocks, comments = _readme_blocks()
    assert sum(len(figures(b)) for b in blocks) >= 10, "the rule no longer finds the README's figures"
    unsourced = []
    for block in blocks:
        if not figures(block):
            continue
        scripts, files, run = sources(block)
        if not (scripts or files or run):
            unsourced.append(block.strip()[:200])
        for name in scripts:
            assert (REPO / "benchmarks" / f"{name}.py").is_file(), f"README names benchmarks/{name}.py: none"
        for name in files:
            assert (REPO / "docs" / "benchmarks" / f"{name}.json").is_file(), f"README names {name}.json: none"
    assert unsourced == [], "figures whose paragraph names no benchmark (`benchmarks/<x>.py ...`, " + (
        "docs/benchmarks/<x>.json) nor a run (`job=<name>` and the N-core machine):\n" + "\n---\n".join(unsourced)
    )
    quoted = [c for c in comments if figures(c)]
    assert quoted == [], f"figures in code blocks' comments (say them in the prose, with their source): {quoted}"


def test_a_figure_beside_a_benchmarks_json_is_that_files() -> None:
    checked = 0
    for block in _readme_blocks()[0]:
        files = _JSON.findall(block)
        if not files:
            continue
        numbers = [n for f in files for n in _numbers(json.loads((REPO / "docs/benchmarks" / f"{f}.json").read_text()))]
        for value, unit in figures(block):
            if unit in ("KB", "MB", "GB"):
                continue  # a job's size, not a measurement
            assert held_by(value, unit, numbers), f"README's {value}{unit} is not in {files}: {block.strip()[:300]}"
            checked += 1
    assert checked >= 8, "the README quotes fewer benchmark figures beside their JSON than it did"
