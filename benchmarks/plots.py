"""The benchmark pages' plots, drawn from the benchmarks' ``--json`` figures.

    python benchmarks/plots.py [--dir docs/benchmarks]

Reads the JSON objects the scripts write with ``--json PATH`` (``recovery.py`` per job as
``recovery-<job>.json``, ``overhead.py`` as ``overhead.json``, ``node_loss.py`` as
``node_loss.json``, ``vs_skypilot_jobs.py`` as ``vs_skypilot.json``, ``fleet.py`` as
``fleet.json``) from that folder and
writes a PNG beside each; a figure whose JSON is absent is skipped, saying so.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

REPO = Path(__file__).resolve().parents[1]
PHASES = ("detection", "provisioning", "runtime_startup", "restore", "first_step")
ARMS = (("ray_native", "Ray native"), ("async", "ours async"), ("sync", "ours sync"))
CADENCES = ("high", "realistic")


def _load(folder: Path, name: str) -> dict[str, Any] | None:
    path = folder / name
    if not path.exists():
        print(f"skipped: no {path}")
        return None
    return json.loads(path.read_text())


def _save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    # No timestamp in the file: the same figures draw the same PNG.
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    print(f"wrote {path}")


def recovery_phases(runs: dict[str, dict[str, Any]], out: Path) -> None:
    """RTO by phase, cold failover against warm standby, for each job measured."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    labels, bottoms = [], []
    for job, fig_data in runs.items():
        for mode in ("cold", "standby"):
            labels.append(f"{job}\n{'cold' if mode == 'cold' else 'warm standby'}")
            bottoms.append([fig_data[f"{mode}_{p}_s"] for p in PHASES])
    x = range(len(labels))
    base = [0.0] * len(labels)
    for i, phase in enumerate(PHASES):
        heights = [b[i] for b in bottoms]
        ax.bar(x, heights, bottom=base, label=phase.replace("_", " "))
        base = [a + h for a, h in zip(base, heights, strict=True)]
    floors = [fig_data["rto_floor_s"] for fig_data in runs.values() for _ in (0, 1)]
    ax.scatter(x, floors, marker="_", s=600, color="black", label="floor (ray start + load)", zorder=3)
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("seconds from the failure")
    ax.set_title("RTO by phase (benchmarks/recovery.py)")
    ax.legend(fontsize=8, loc="upper right")
    _save(fig, out)


def overhead(data: dict[str, Any], out: Path) -> None:
    """Steps/s of each arm relative to no checkpoints, at both cadences."""
    fig, ax = plt.subplots(figsize=(7, 3.4))
    none = data["steps_per_s_none"]
    width = 0.25
    for i, (arm, label) in enumerate(ARMS):
        values = [data[f"steps_per_s_{arm}_{c}"] / none for c in CADENCES]
        ax.bar([c + (i - 1) * width for c in range(len(CADENCES))], values, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(0.97, color="grey", linestyle="--", linewidth=0.8, label="goal 0.97")
    ax.set_xticks(range(len(CADENCES)), ["every 50 steps", "every ~10 s"])
    ax.set_ylabel("steps/s / none")
    ax.set_title("Checkpoint overhead (benchmarks/overhead.py)")
    ax.legend(fontsize=8)
    _save(fig, out)


def _rto_bars(
    out: Path, title: str, xlabel: str, bars: list[tuple[str, float, str]], goal: float, goal_label: str
) -> None:
    """Horizontal bars of RTOs (label, seconds, colour) and the goal's line."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.barh([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
    ax.axvline(goal, color="grey", linestyle="--", linewidth=0.8, label=goal_label)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    _save(fig, out)


def node_loss(data: dict[str, Any], out: Path) -> None:
    bars = [
        ("kill_node, replaced", data["rto_node_replaced_s"], "tab:orange"),
        ("kill_node, elastic", data["rto_node_elastic_s"], "tab:green"),
        ("kill_region, cold failover", data["rto_cold_s"], "tab:blue"),
    ]
    if data.get("rto_node_standby_s") is not None:  # measured since 2026-12-05
        bars.insert(1, ("kill_node, spare node", data["rto_node_standby_s"], "tab:purple"))
    if data.get("rto_kill_worker_s") is not None:  # measured since 2026-12-04
        bars.insert(0, ("kill_worker", data["rto_kill_worker_s"], "tab:red"))
    goal = data["rto_cold_s"] * 0.4
    label = "goal, replaced node: 0.4 x cold"
    _rto_bars(out, "In-region recovery (benchmarks/node_loss.py)", "RTO, seconds", bars, goal, label)


def vs_skypilot(data: dict[str, Any], out: Path) -> None:
    bars = [("ours, cold", data["rto_ours_s"], "tab:blue")]
    # Each arm only where the run measured it (--systems).
    if data.get("rto_ours_back_s") is not None:
        bars.append(("ours, back to an entry", data["rto_ours_back_s"], "tab:purple"))
    if data.get("rto_ours_standby_s") is not None:
        bars.append(("ours, warm standby", data["rto_ours_standby_s"], "tab:green"))
    bars.append(("SkyPilot managed job", data["rto_skypilot_s"], "tab:grey"))
    title = "Against SkyPilot managed jobs (vs_skypilot_jobs.py)"
    _rto_bars(out, title, "RTO after scancel, seconds", bars, data["rto_skypilot_s"] / 2, "goal: half theirs")


def fleet(data: dict[str, Any], out: Path) -> None:
    """$ per run and goodput per placement policy, deadline misses written on the bars."""
    policies = (("listed", "listed"), ("cheapest", "cheapest-first"), ("cost", "cost"), ("cost_up", "cost + UP"))
    fig, (dollars, good) = plt.subplots(1, 2, figsize=(9, 3.4))
    names = [label for _, label in policies]
    usd = [data[f"usd_per_run_{k}"] for k, _ in policies]
    bars = dollars.bar(names, usd, color=["tab:grey", "tab:orange", "tab:blue", "tab:cyan"])
    for bar, (k, _) in zip(bars, policies, strict=True):
        misses = data[f"deadline_misses_{k}"]
        dollars.annotate(
            f"{misses} missed",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    if "usd_per_run_floor" in data:
        floor = data["usd_per_run_floor"]
        dollars.axhline(floor, color="black", linestyle="--", linewidth=0.8, label="floor: cheapest spot, never lost")
        dollars.legend(fontsize=7, loc="upper right")
    dollars.set_ylabel("$ per run")
    dollars.set_title(f"{data['runs']} runs, {data['deadline_runs']} with a deadline", fontsize=9)
    good.bar(
        names, [data[f"goodput_{k}"] for k, _ in policies], color=["tab:grey", "tab:orange", "tab:blue", "tab:cyan"]
    )
    good.set_ylim(min(data[f"goodput_{k}"] for k, _ in policies) - 0.05, 1.0)
    good.set_ylabel("goodput (productive / wall)")
    good.set_title("fleet simulation (fleet.py)", fontsize=9)
    for ax in (dollars, good):
        ax.tick_params(axis="x", labelsize=8)
    _save(fig, out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=REPO / "docs" / "benchmarks", help="where the JSON is and the PNGs go")
    args = ap.parse_args(argv)
    folder: Path = args.dir
    runs = {p.stem.removeprefix("recovery-"): json.loads(p.read_text()) for p in sorted(folder.glob("recovery-*.json"))}
    if runs:
        recovery_phases(runs, folder / "recovery-phases.png")
    else:
        print(f"skipped: no {folder}/recovery-<job>.json")
    for name, draw in (
        ("overhead", overhead),
        ("node_loss", node_loss),
        ("vs_skypilot", vs_skypilot),
        ("fleet", fleet),
    ):
        data = _load(folder, f"{name}.json")
        if data is not None:
            draw(data, folder / f"{name.replace('_', '-')}.png")


if __name__ == "__main__":
    main()
