"""The README's two set-up commands are the ones CI and users run."""

from __future__ import annotations

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
