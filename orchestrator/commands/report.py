"""The incident report: a run's timeline, totals and a loss-against-step plot.

``action=report run_id=X`` prints it and writes ``report.png`` beside the
journal; every run that had incidents writes it at its end. Everything comes from
the run's files (journal, result.json, the loss series), so it also works for a
run that is still going or whose controller died.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.commands.goodput_text import LABELS, goodput_lines, seconds_by_category
from orchestrator.commands.status import run_goodput
from orchestrator.errors import error, printable
from orchestrator.runstate import rundir
from orchestrator.runstate.event_json import to_json
from orchestrator.runstate.events import FaultInjected, RuntimeReport
from orchestrator.runstate.journal import read_typed
from orchestrator.runstate.losses import read_loss
from orchestrator.runstate.result import ended_by_user_error, read_result
from orchestrator.runstate.state import fold
from recovery.detection import user_error_line
from recovery.fsio import write_private

PLOT_NAME = rundir.REPORT_PLOT


@dataclass
class Row:
    """One incident as a person reads it."""

    at_s: float  # seconds since the run started
    fault: str  # what was injected (or "-": a failure nobody injected)
    failure: str
    detected_after_s: float | None
    decision: str
    from_region: str
    to_region: str | None
    restored_step: int | None
    lost_steps: int | None
    rto_s: float | None


@dataclass
class Report:
    run_id: str
    status: str
    rows: list[Row] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    reason: str = ""
    traceback: str | None = None
    # (step the worker group started from, its world size), in order: where it changed.
    worlds: list[tuple[int, int]] = field(default_factory=list)
    # A search: its metric, and each trial's value of it by iteration (trial_result events).
    search_metric: str = ""
    search: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    # The loss series (loss.jsonl), read with the rest before anything is written; None: not read.
    loss: list[dict[str, Any]] | None = field(default=None, compare=False)
    # The workload's exception that failed the run ({"error", "step", "site"}), or None.
    user_error: dict[str, Any] | None = None
    # Where the wall time went and what it cost: result.json's goodput block, or the journal's.
    goodput: dict[str, Any] | None = None

    @property
    def totals(self) -> dict[str, Any]:
        rtos = [r.rto_s for r in self.rows if r.rto_s is not None]
        lost = [r.lost_steps for r in self.rows if r.lost_steps is not None]
        return {
            "faults_injected": len(self.faults),
            "incidents": len(self.rows),
            "attempts": len(self.attempts),
            "lost_steps": sum(lost),
            "max_lost_steps": max(lost, default=0),
            "mean_rto_s": round(sum(rtos) / len(rtos), 3) if rtos else None,
            "max_rto_s": round(max(rtos), 3) if rtos else None,
            "downtime_s": round(sum(rtos), 3),
        }


_DECISION_FOR = {
    "worker_lost": "restart workers in place (Ray Train)",
    "controller_lost": "resume (action=resume)",
    "node_lost": "restart workers in place (replacement node, or the nodes left)",
}


def world_sizes(events: list[Any]) -> list[tuple[int, int]]:
    """Each worker group's start (the step it restored) and size, from the runtime's
    train_started reports: the world-size-over-steps series (empty: none reported it)."""
    out: list[tuple[int, int]] = []
    for ev in events:
        if isinstance(ev, RuntimeReport) and ev.kind == "train_started" and ev.fields.get("by") == "runtime":
            size, step = ev.fields.get("world_size"), ev.fields.get("restored_step")
            if isinstance(size, int) and isinstance(step, int):
                out.append((step, size))
    return out


def search_series(events: list[Any], metric: str) -> dict[str, list[tuple[int, float]]]:
    """Each trial's ``metric`` by iteration, from the runtime's trial_result events; an
    iteration reported again (a trial resumed from an earlier checkpoint) keeps its last."""
    by_trial: dict[str, dict[int, float]] = {}
    for ev in events:
        if not (isinstance(ev, RuntimeReport) and ev.kind == "trial_result" and ev.fields.get("by") == "runtime"):
            continue
        trial, it, metrics = ev.fields.get("trial_id"), ev.fields.get("iteration"), ev.fields.get("metrics")
        value = metrics.get(metric) if isinstance(metrics, dict) else None
        if isinstance(trial, str) and isinstance(it, int) and isinstance(value, int | float):
            by_trial.setdefault(trial[:64], {})[it] = float(value)
    return {t: sorted(points.items()) for t, points in sorted(by_trial.items())}


def build(run_dir: str) -> Report | None:
    events = list(read_typed(rundir.journal_path(run_dir)))
    view = fold(events)
    if view.first_ts is None:
        return None  # no word of the controller's
    result = read_result(run_dir)
    first = view.run_starts[0] if view.run_starts else None
    started = float(first.ts) if first is not None else view.first_ts
    run_id = str(first.run_id) if first is not None else os.path.basename(run_dir)
    rep = Report(run_id=run_id, status=(result or {}).get("status", view.status), result=result)
    rep.reason = (result or {}).get("reason", "")
    rep.traceback = (result or {}).get("error_traceback")
    rep.user_error = failed_by_user_code(result, ended_by_user_error(view))
    rep.faults = [to_json(f) for f in view.faults]
    rep.attempts = [to_json(a) for a in view.attempts]
    rep.worlds = world_sizes(events)
    rep.goodput = run_goodput(events, result)
    rep.loss = read_loss(run_dir)
    hpo = view.config.get("hpo") if isinstance(view.config, dict) else None
    if isinstance(hpo, dict) and hpo.get("enabled"):
        rep.search_metric = str(hpo.get("metric") or "")
        rep.search = search_series(events, rep.search_metric)
    for inc in view.incidents:
        decision = next(
            (d for d in view.decisions if float(d.ts) >= float(inc.detected_at) - 1e-3 and d.failure == inc.kind),
            None,
        )
        rep.rows.append(
            Row(
                at_s=round(float(inc.failed_at) - started, 3),
                fault=_fault_before(view.faults, float(inc.failed_at)),
                failure=inc.kind,
                detected_after_s=inc.detected_after_s,
                decision=str(decision.action) if decision else _DECISION_FOR.get(inc.kind, "-"),
                from_region=inc.from_region,
                to_region=inc.to_region,
                restored_step=inc.restored_step,
                lost_steps=inc.lost_steps,
                rto_s=inc.rto_s,
            )
        )
    rep.rows.sort(key=lambda r: r.at_s)
    return rep


def failed_by_user_code(result: dict[str, Any] | None, from_journal: dict[str, Any] | None) -> dict[str, Any] | None:
    """The user error that failed the run: result.json's once it is written (the word on
    how the run ended), the journal's before that (a controller that died writing it)."""
    if result is None:
        return from_journal
    bug = result.get("user_error")
    return bug if result.get("status") == "FAILED" and isinstance(bug, dict) else None


def _fault_before(faults: tuple[FaultInjected, ...], failed_at: float) -> str:
    # The fault that caused a failure fired at (or just before) the failure's time.
    near = [f for f in faults if float(f.ts) <= failed_at + 1.0]
    if not near:
        return "-"
    f = max(near, key=lambda f: float(f.ts))
    where = f.extra.get("during") or f.extra.get("trigger") or f"step {f.step}"
    return f"{f.kind} ({where})"


def render(rep: Report) -> str:
    lines = [f"incident report: run {rep.run_id}: {rep.status}"]
    if rep.reason:
        lines.append(f"  reason: {rep.reason}")
    bug = None if rep.user_error is None else user_error_text(rep.user_error)
    if bug is not None and bug not in rep.reason:
        lines.append(f"  user error: {bug}")
    header = ("t+s", "fault", "failure", "detect", "decision", "from -> to", "restored", "lost", "RTO")
    table = [header]
    for r in rep.rows:
        table.append(
            (
                f"{r.at_s:.1f}",
                r.fault,
                r.failure,
                "-" if r.detected_after_s is None else f"{r.detected_after_s:.2f}s",
                r.decision,
                f"{r.from_region} -> {r.to_region or '-'}",
                "-" if r.restored_step is None else str(r.restored_step),
                "-" if r.lost_steps is None else str(r.lost_steps),
                "-" if r.rto_s is None else f"{r.rto_s:.1f}s",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        lines.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if not rep.rows:
        lines.append("  (no incidents)")
    t = rep.totals
    lines.append(
        f"  totals: {t['faults_injected']} faults injected, {t['incidents']} incidents, {t['attempts']} attempts, "
        f"{t['lost_steps']} steps lost (max {t['max_lost_steps']}), RTO mean "
        f"{_s(t['mean_rto_s'])} max {_s(t['max_rto_s'])}"
    )
    lines.extend("  " + line for line in goodput_lines(rep.goodput))
    if rep.result and rep.result.get("weights_sha256"):
        lines.append(f"  final weights sha256: {rep.result['weights_sha256']}")
    if rep.traceback:
        lines.append("  the workload's traceback:")
        lines.extend("    " + line for line in rep.traceback.rstrip().splitlines())
    return "\n".join(lines)


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}s"


def plot(run_dir: str, rep: Report, out_dir: str | None = None) -> str:
    """The report's figure, written as ``report.png`` beside the journal (or in ``out_dir``)."""
    plt = _pyplot()
    points = read_loss(run_dir) if rep.loss is None else rep.loss
    fig = search_figure(rep, plt) if rep.search else figure(rep, points, plt)
    return _save(fig, plt, out_dir or run_dir)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display here, and none wanted
    import matplotlib.pyplot as plt

    return plt


def figure(rep: Report, points: list[dict[str, Any]], plt: Any = None) -> Any:
    """Loss against step, faults and restores marked, the region along the step axis; a
    run the workload's own code failed, its error at the step it was raised in."""
    plt = plt or _pyplot()
    colours = region_colours({str(p["region"]) for p in points} | {str(a["region"]) for a in rep.attempts})
    # The world size gets a panel of its own where it changed (a lost node, an elastic resume).
    changed = len({w for _, w in rep.worlds}) > 1
    time_panel = bool(seconds_by_category(rep.goodput or {}))
    ratios = [5, *([1.5] if changed else []), 1, *([0.8] if time_panel else [])]
    fig, axes = plt.subplots(
        len(ratios),
        1,
        figsize=(10, 5.5 + (1.5 if changed else 0) + (1.2 if time_panel else 0)),
        gridspec_kw={"height_ratios": ratios},
        constrained_layout=True,
    )
    ax, band = axes[0], axes[len(ratios) - 1 - int(time_panel)]
    for other in axes[1 : len(ratios) - int(time_panel)]:
        other.sharex(ax)
    for above in axes[: len(ratios) - 1 - int(time_panel)]:
        above.tick_params(labelbottom=False)  # the step axis is read off the region band
    if time_panel:
        time_bar(axes[-1], rep.goodput or {})
    if changed:
        _world_panel(axes[1], rep.worlds, max((int(a.get("last_step") or 0) for a in rep.attempts), default=0))
    by_gen: dict[int, list[dict[str, Any]]] = {}
    for p in points:
        by_gen.setdefault(int(p["generation"]), []).append(p)
    for pts in by_gen.values():
        pts.sort(key=lambda p: p["step"])
        region = str(pts[0]["region"])
        ax.plot([p["step"] for p in pts], [p["loss"] for p in pts], "-", color=colours[region], lw=1.2)
    _faults_and_restores(ax, rep, lambda r: f"restore→{r.to_region or r.from_region}")
    ax.set_ylabel("training loss")
    if points and min(p["loss"] for p in points) > 0:
        ax.set_yscale("log")  # from ~2 down to ~0.01: a linear axis hides all but the start
    ax.set_title(f"{rep.run_id}: {rep.status}, {len(rep.rows)} incidents")
    _attempts_band(band, rep.attempts, lambda region: colours.get(region, "grey"))
    if rep.user_error is not None:
        _user_error_mark(ax, rep.user_error, points, rep.attempts)
    band.set_yticks([])
    band.set_xlabel("step")
    band.set_ylabel("region")
    return fig


# The categories' colours in the time bar: productive green, the rest by kind of loss.
TIME_COLOURS = {
    "productive": "tab:green",
    "retrained": "tab:red",
    "checkpoint_stall": "tab:olive",
    "restore": "tab:cyan",
    "startup": "tab:blue",
    "provisioning": "tab:purple",
    "waiting_for_capacity": "tab:pink",
    "failure_detection": "tab:orange",
    "orchestration": "tab:gray",
}


def time_bar(ax: Any, goodput: dict[str, Any]) -> None:
    """Where the wall time went: one bar, a segment per category, in seconds."""
    left = 0.0
    for category, secs in seconds_by_category(goodput).items():
        if secs <= 0:
            continue
        ax.barh(0, secs, left=left, color=TIME_COLOURS[category], label=f"{LABELS[category]} {secs:.1f}s")
        left += secs
    ax.set_yticks([])
    ax.set_xlim(0, max(left, 1e-9))
    ax.set_xlabel("wall time (s)")
    head = goodput_lines(goodput)[0].split(":")[0].removeprefix("goodput").strip()
    ax.set_title(f"where the time went: goodput {head}", fontsize=9)
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.9), frameon=False)


def search_figure(rep: Report, plt: Any = None) -> Any:
    """A search's report: each trial's metric over its iterations (the best one thick, the
    ones ASHA stopped dashed and ended with an x), and the faults and restores by search step."""
    from matplotlib.ticker import MaxNLocator

    plt = plt or _pyplot()
    time_panel = bool(seconds_by_category(rep.goodput or {}))
    ratios = [5, 1, *([0.8] if time_panel else [])]
    fig, axes = plt.subplots(
        len(ratios),
        1,
        figsize=(10, 5.5 + (1.2 if time_panel else 0)),
        gridspec_kw={"height_ratios": ratios},
        constrained_layout=True,
    )
    ax, band = axes[0], axes[1]
    if time_panel:
        time_bar(axes[-1], rep.goodput or {})
    result = rep.result or {}
    best = (result.get("best_trial") or {}).get("trial_id")
    max_t = (result.get("search") or {}).get("max_t")
    ended = {t.get("trial_id"): t for t in result.get("trials") or [] if isinstance(t, dict)}
    for i, (trial, points) in enumerate(rep.search.items()):
        its, values = [p[0] for p in points], [p[1] for p in points]
        record = ended.get(trial, {})
        stopped = record.get("status") == "TERMINATED" and max_t is not None and record.get("iteration", 0) < max_t
        colour = plt.get_cmap("tab20")(i % 20)
        ax.plot(its, values, "--" if stopped else "-", color=colour, lw=2.8 if trial == best else 1.0, label=trial)
        if stopped:
            ax.plot(its[-1:], values[-1:], "x", color=colour, ms=8)
    ax.set_xlabel("iteration")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(rep.search_metric)
    ax.set_title(f"{rep.run_id}: {rep.status}, {len(rep.search)} trials, best {best or '-'} (thick); stopped: x")
    if len(rep.search) <= 20:
        ax.legend(fontsize=7, ncol=2)
    last = max((int(a.get("last_step") or 0) for a in rep.attempts), default=0)
    colours = region_colours(str(a["region"]) for a in rep.attempts)
    _attempts_band(band, rep.attempts, lambda region: colours.get(region, "grey"))
    _faults_and_restores(band, rep, lambda r: "restore")
    band.set_xlim(0, max(last, 1))
    band.set_yticks([])
    band.set_xlabel("search step")
    return fig


# One colour per region, in the order of their names: a failover shows as a change of colour.
REGION_PALETTE = (
    "tab:blue",
    "tab:orange",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
)


def region_colours(regions: Iterable[str]) -> dict[str, str]:
    """Each region's colour: a different one for each of up to len(REGION_PALETTE) regions
    (red, green and grey are left to the faults, the restores and a region not known)."""
    return {r: REGION_PALETTE[i % len(REGION_PALETTE)] for i, r in enumerate(sorted(set(regions)))}


def _attempts_band(band: Any, attempts: list[dict[str, Any]], colour_of: Any) -> None:
    """Each attempt as a bar from the step it restored to its last, named by region and generation."""
    for a in attempts:
        lo = int(a.get("restored_step") or 0)
        hi = int(a.get("last_step") or lo)
        if hi > lo:
            region = str(a["region"])
            band.broken_barh([(lo, hi - lo)], (0, 1), color=colour_of(region), alpha=0.8)
            band.text((lo + hi) / 2, 0.5, f"{region} g{a['generation']}", ha="center", va="center", fontsize=7)


def _faults_and_restores(ax: Any, rep: Report, restore_label: Any) -> None:
    """Each fault at its step (at the top), each restore at the step restored (at the bottom)."""
    for f in rep.faults:
        step = f.get("step")
        if isinstance(step, int) and step > 0:
            _mark(ax, step, str(f["kind"]), "red", "--", top=True)
    for r in rep.rows:
        if r.restored_step is not None:
            _mark(ax, r.restored_step, restore_label(r), "green", ":", top=False)


# The exception's line on the plot is cut to this many characters (the text report has it whole).
ERROR_CHARS = 80


def user_error_lines(bug: dict[str, Any], width: int = ERROR_CHARS) -> list[str]:
    """A user error as the plot labels it: the exception line (cut to ``width``), the step
    it was raised in, and the user's file:line where known (as the terminal's advice says it)."""
    lines = [_cut(printable(str(bug.get("error") or "the workload raised")), width)]
    step = failing_step(bug)
    lines.append("step ?" if step is None else "before the first step (step 0)" if step == 0 else f"in step {step}")
    site = bug.get("site")
    if isinstance(site, str) and site:
        # A long path keeps its end: the file's name and the line number are what a person looks for.
        site = printable(site)
        lines.append("at " + (site if len(site) <= width else "…" + site[-(width - 1) :]))
    return lines


def user_error_text(bug: dict[str, Any]) -> str:
    """The user error in one line, as the run's reason and the terminal's advice say it."""
    site = bug.get("site") if isinstance(bug.get("site"), str) else None
    return printable(user_error_line(str(bug.get("error") or "the workload raised"), failing_step(bug), site or None))


def failing_step(bug: dict[str, Any]) -> int | None:
    step = bug.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else None


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def error_axis_end(step: int | None, points: list[dict[str, Any]], attempts: list[dict[str, Any]]) -> int:
    """Where the step axis of a failed run ends: past the failing step, the last loss point
    and the last step an attempt reached, so the failure is on it even with no loss plotted."""
    reached = [int(p["step"]) for p in points] + [int(a.get("last_step") or 0) for a in attempts]
    return max([step or 0, *reached, 1])


def _user_error_mark(
    ax: Any, bug: dict[str, Any], points: list[dict[str, Any]], attempts: list[dict[str, Any]]
) -> None:
    """The failure at its step: a line, an x on the loss where one was plotted, and the
    error, step and file:line beside it (on the side with room)."""
    step = failing_step(bug)
    end = error_axis_end(step, points, attempts)
    ax.set_xlim(0, end * 1.05)
    if step is None:
        at, side = end, "right"  # not known where: at the end of what ran
    else:
        at, side = step, "right" if step > end / 2 else "left"
    ax.axvline(at, color="red", ls="-", lw=1.2)
    before = [p for p in points if int(p["step"]) <= at]
    if before:
        last = max(before, key=lambda p: int(p["step"]))
        ax.plot([at], [last["loss"]], "X", color="red", ms=9)
    ax.annotate(
        "user error\n" + "\n".join(user_error_lines(bug)),
        (at, 0.55),
        xycoords=("data", "axes fraction"),
        xytext=(-8 if side == "right" else 8, 0),
        textcoords="offset points",
        ha=side,
        va="center",
        multialignment="left",
        fontsize=8,
        color="darkred",
        bbox={"boxstyle": "round", "fc": "mistyrose", "ec": "red", "alpha": 0.9},
        parse_math=False,  # a "$" in the message is text, not mathtext
    )


def _world_panel(ax: Any, worlds: list[tuple[int, int]], last_step: int) -> None:
    """World size against step: each worker group's size from the step it restored."""
    steps = [s for s, _ in worlds] + [max(last_step, worlds[-1][0])]
    sizes = [w for _, w in worlds] + [worlds[-1][1]]
    ax.step(steps, sizes, where="post", color="purple", lw=1.2)
    ax.set_ylabel("workers")
    ax.set_ylim(0, max(sizes) + 1)
    ax.set_yticks(sorted(set(sizes)))


def _mark(ax: Any, step: int, text: str, colour: str, style: str, top: bool) -> None:
    """A vertical line at ``step``, labelled along it (at the top or the bottom)."""
    ax.axvline(step, color=colour, ls=style, lw=0.8)
    ax.annotate(
        text,
        (step, 1.0 if top else 0.02),
        xycoords=("data", "axes fraction"),
        rotation=90,
        va="top" if top else "bottom",
        ha="right" if top else "left",
        fontsize=7,
        color=colour,
    )


def write(run_dir: str, rep: Report | None = None, out_dir: str | None = None) -> tuple[str, str] | None:
    """The report's text and the plot's path (of ``rep``, or the run's built here), or None
    for a run with no journal. Both are written beside the journal, or in ``out_dir`` (a
    run read from the control store, whose folder here is a temporary one)."""
    rep = rep or build(run_dir)
    if rep is None:
        return None
    text = render(rep)
    # Written aside and renamed in: a link planted under the name is replaced, never written through.
    write_private(os.path.join(out_dir or run_dir, rundir.REPORT_TEXT), (text + "\n").encode())
    return text, plot(run_dir, rep, out_dir)


def _save(fig: Any, plt: Any, run_dir: str) -> str:
    """The figure as the run's report.png (written as report.txt is); its path."""
    import io

    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    path = os.path.join(run_dir, PLOT_NAME)
    write_private(path, png.getvalue())
    return path


def main(home: str, run_id: str, junit: str | None = None, out_dir: str | None = None) -> int:
    """``action=report``: the incident report's text, and where its plot was written;
    with ``junit``, the JUnit XML report written there too. ``out_dir``: where the text
    and plot go instead of the run's folder."""
    run_dir = rundir.run_path(home, run_id)
    rep = build(run_dir)
    done = write(run_dir, rep, out_dir)
    if rep is None or done is None:
        return error(f"run_id: no run named {run_id!r} under {home}")
    text, png = done
    print(text)
    print(f"plot: {png}")
    if junit is not None:
        path = os.path.abspath(os.path.expanduser(junit))
        try:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(junit_xml(rep))
        except OSError as exc:
            return error(f"junit: cannot write {path} ({exc.strerror or exc}); give a writable file path")
        print(f"junit: {path}")
    return 0


def junit_xml(rep: Report) -> str:
    """The run as a JUnit report CI systems read: a test suite with the run's end (failed
    unless it SUCCEEDED), one case per incident (its recovery time) and one per
    chaos.objectives objective (failed when missed)."""
    from xml.etree import ElementTree as ET

    result = rep.result or {}
    suite = ET.Element("testsuite", name=f"orchestrator.{rep.run_id}")
    cases: list[tuple[ET.Element, str | None]] = []
    run = ET.Element("testcase", classname=rep.run_id, name="run", time=str(result.get("duration_s") or 0))
    ended = None if rep.status == "SUCCEEDED" else f"{rep.status}: {rep.reason or '-'}"
    cases.append((run, ended))
    for i, row in enumerate(rep.rows, 1):
        name = f"incident {i}: {row.failure} {row.from_region} -> {row.to_region or '-'}"
        case = ET.Element("testcase", classname=rep.run_id, name=name, time=str(row.rto_s or 0))
        ET.SubElement(case, "system-out").text = (
            f"fault {row.fault}; detected after {_s(row.detected_after_s)}; restored step {row.restored_step}; "
            f"lost steps {row.lost_steps}; decision {row.decision}"
        )
        cases.append((case, None))
    objectives = result.get("objectives") if isinstance(result.get("objectives"), dict) else {}
    for c in objectives.get("checked") or []:
        name = f"objective {c.get('objective')} {c.get('limit')}"
        case = ET.Element("testcase", classname=rep.run_id, name=name, time="0")
        missed = None if c.get("met") else f"measured {c.get('measured')}{'; ' + c['why'] if c.get('why') else ''}"
        cases.append((case, missed))
    for case, failure in cases:
        if failure is not None:
            ET.SubElement(case, "failure", message=failure[:1000]).text = failure
        suite.append(case)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for _, f in cases if f is not None)))
    suite.set("time", str(result.get("duration_s") or 0))
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
