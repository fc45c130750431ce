"""``-m`` (``--multirun``): a sweep, one run per combination of the values swept.

As Hydra's basic sweeper: ``KEY=a,b`` (and ``range()``, ``choice()``, ``sort()``,
``shuffle()``; ``GROUP=glob(pattern)`` over the group's options) give each key its
values, parsed by Hydra's own override parser (quotes, nested lists), and the runs are
their cartesian product, the first key varying slowest. The runs go one after another,
each as ``python -m orchestrator <its overrides> run_id=<id>`` would: a process of its
own, a run like any other (action=status, report and resume take it). Every run's config
is composed and checked before the first starts, so a typo in the last stops the sweep
before anything launches.

Run ids: a run_id given once names the sweep (its runs are <run_id>-0, -1, ...); a run_id
swept (run_id=a,b) names each run; none given, each gets one of its own, as a run does.
Ctrl-C (or SIGTERM) is passed on to the run going on, which ends INTERRUPTED as any run;
the runs after it are not started. The summary at the end reads each run's folder.
Exit status: 0 when every run SUCCEEDED, 130 when the sweep was stopped, else 1.
"""

from __future__ import annotations

import itertools
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from orchestrator.commands.runs_list import fmt_duration, fmt_step, read_row
from orchestrator.config.checks import MAX_SWEEP_RUNS
from orchestrator.config.cli import Options
from orchestrator.config.schema import Action, Config
from orchestrator.errors import EXIT_INTERRUPTED, ConfigError, printable
from orchestrator.runstate import rundir

NOT_STARTED = "NOT_STARTED"
RUN_ID = "run_id"


@dataclass(frozen=True)
class Sweep:
    """The swept keys (as given, '+' and all) and each run's overrides, in order."""

    keys: tuple[str, ...]
    runs: tuple[tuple[str, ...], ...]

    def values(self, i: int) -> tuple[str, ...]:
        """Run i's value of each swept key, as given on its command line."""
        given = {o.partition("=")[0]: o.partition("=")[2] for o in self.runs[i]}
        return tuple(given[k] for k in self.keys)


def expand(overrides: list[str], group_options: Callable[[str], list[str]] = lambda group: []) -> Sweep:
    """The runs of a sweep: each override that sweeps (Hydra's grammar) gives its key's
    values, each other override stays as given; ConfigError (one line naming the key) for
    one that cannot be parsed, a sweep with no value, or interval(), which draws values
    (a sampling sweeper's) rather than listing them. ``group_options``: a config group's
    options, for glob()."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob
    from hydra.errors import OverrideParseException

    from orchestrator.config.hydra_errors import unparsable

    parser = OverridesParser.create()
    keys: list[str] = []
    choices: list[list[str]] = []
    counts: list[int] = []
    for o in overrides:
        try:
            (parsed,) = parser.parse_overrides([o])
        except OverrideParseException as exc:
            raise unparsable([o], exc) from None
        if not parsed.is_sweep_override():
            choices.append([o])
            continue
        key = parsed.get_key_element()
        if key in keys:
            raise ConfigError(key.lstrip("+~"), "is swept twice; give all its values in one KEY=a,b")
        value = parsed.value()
        if isinstance(value, Glob):
            options = group_options(parsed.key_or_group)
            if not options:
                raise ConfigError(key, "glob() picks among a config group's options; list the values instead: KEY=a,b")
            values = list(value.filter(options))
        elif parsed.is_discrete_sweep():
            values = list(parsed.sweep_string_iterator())
        else:
            raise ConfigError(
                key.lstrip("+~"),
                "interval() draws values, which a sampling sweeper does; list them (a,b), or range(start,stop,step)",
            )
        if not values:
            raise ConfigError(key.lstrip("+~"), f"the sweep {o.partition('=')[2]!r} gives no value")
        keys.append(key)
        counts.append(len(values))
        choices.append([f"{key}={v}" for v in values])
    refuse_too_many(keys, counts)
    return Sweep(tuple(keys), tuple(tuple(run) for run in itertools.product(*choices)))


def refuse_too_many(keys: list[str], counts: list[int]) -> None:
    """A sweep of more than MAX_SWEEP_RUNS runs (the product of each key's values) is
    refused before one is listed: its runs go one after another, each a training run."""
    total = math.prod(counts)
    if total > MAX_SWEEP_RUNS:
        shown = " x ".join(f"{n} ({k.lstrip('+~')})" for k, n in zip(keys, counts, strict=True))
        raise ConfigError(
            keys[0].lstrip("+~"),
            f"the sweep gives {shown} = {total} runs; at most {MAX_SWEEP_RUNS}: sweep fewer values",
        )


def named(sweep: Sweep) -> list[tuple[str, ...]]:
    """Each run's overrides with its run_id as the sweep names it (module doc); a run
    given none keeps none, for the run to name itself. ConfigError if two would share one."""
    out = []
    swept = RUN_ID in {k.lstrip("+") for k in sweep.keys}
    for i, run in enumerate(sweep.runs):
        given = [o.partition("=")[2] for o in run if o.partition("=")[0].lstrip("+") == RUN_ID]
        rest = tuple(o for o in run if o.partition("=")[0].lstrip("+") != RUN_ID)
        if not given or given[-1] in ("null", ""):
            out.append(rest)
            continue
        run_id = given[-1] if swept else f"{given[-1]}-{i}"
        out.append((*rest, f"{RUN_ID}={run_id}"))
    ids = [o for run in out for o in run if o.startswith(f"{RUN_ID}=")]
    twice = next((i for i in ids if ids.count(i) > 1), None)
    if twice is not None:
        raise ConfigError(RUN_ID, f"the sweep names two runs {twice.partition('=')[2]!r}; give each value once")
    return out


# --- running it -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    """A run of the sweep, composed and checked: its overrides (run_id last) and config."""

    overrides: tuple[str, ...]
    config: Config
    run_id: str
    values: tuple[str, ...]


class Runner(Protocol):
    """Runs one run of the sweep to its end: its exit status."""

    def run(self, planned: Planned) -> int: ...

    def interrupt(self, signum: int) -> None:
        """A signal came to the sweep: pass it on to the run going on, if any."""


class ChildRunner:
    """Each run as ``python -m orchestrator <overrides>``, in a process group of its own,
    so that a signal reaches it once, from the sweep (a terminal's Ctrl-C reaches only
    the sweep): the run and a supervisor's controller under it stop as a run alone does."""

    def __init__(self, prefix: list[str] | None = None) -> None:
        self.prefix = prefix or [sys.executable, "-m", "orchestrator"]
        self.child: subprocess.Popen[bytes] | None = None

    def run(self, planned: Planned) -> int:
        self.child = subprocess.Popen([*self.prefix, *planned.overrides], start_new_session=True)
        try:
            return self.child.wait()
        finally:
            self.child = None

    def interrupt(self, signum: int) -> None:
        child = self.child
        if child is not None and child.poll() is None:
            try:
                os.killpg(child.pid, signum)
            except ProcessLookupError:
                pass


def runner() -> Runner:
    """The runner of a sweep started from the command line."""
    return ChildRunner()


def run_sweep(plan: list[Planned], keys: tuple[str, ...], runner: Runner) -> int:
    """The runs one after another, then the summary (stdout); the exit status (module doc)."""
    stopped: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        stopped.append(signum)
        runner.interrupt(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    codes: dict[str, int] = {}
    try:
        for i, planned in enumerate(plan):
            if stopped:
                break
            shown = " ".join(f"{k}={v}" for k, v in zip(keys, planned.values, strict=True))
            print(f"sweep: run {i + 1} of {len(plan)}: {planned.run_id} {shown}".rstrip(), file=sys.stderr, flush=True)
            codes[planned.run_id] = runner.run(planned)
            if codes[planned.run_id] == EXIT_INTERRUPTED:
                stopped.append(signal.SIGINT)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    rows = [summary_row(p, codes.get(p.run_id)) for p in plan]
    print(render_summary(keys, rows, stopped=bool(stopped)))
    if stopped:
        return EXIT_INTERRUPTED
    return 0 if all(r.status == "SUCCEEDED" for r in rows) else 1


@dataclass(frozen=True)
class SummaryRow:
    run_id: str
    values: tuple[str, ...]
    status: str
    step: str
    loss: str
    duration: str
    reason: str = ""


def summary_row(planned: Planned, code: int | None, now: float | None = None) -> SummaryRow:
    """What the run's folder says of it (as action=list reads it), and its final loss;
    a run not started, or stopped before it wrote a word, says why."""
    from orchestrator.runstate.journal import DamagedFile
    from orchestrator.runstate.result import read_result

    runs_dir = rundir.runs_path(planned.config.home_path)
    run_dir = os.path.join(runs_dir, planned.run_id)
    base = SummaryRow(planned.run_id, planned.values, NOT_STARTED, "-", "-", "-")
    if code is None:
        return replace(base, reason="the sweep was stopped before it")
    if not os.path.isdir(run_dir):
        return replace(base, reason=f"exited with status {code} before it started (its error is above)")
    row = read_row(runs_dir, planned.run_id, time.time() if now is None else now)
    try:
        result = read_result(run_dir)
    except (DamagedFile, OSError):
        result = None
    return SummaryRow(
        planned.run_id,
        planned.values,
        row.status,
        fmt_step(row.step, row.total),
        fmt_loss(result),
        fmt_duration(row.duration_s),
        row.reason,
    )


# result.json's metrics that are a final loss: a train function's own, else the held-out one.
LOSS_METRICS = ("loss", "eval_loss")


def fmt_loss(result: dict[str, Any] | None) -> str:
    """The run's final loss (result.json's metrics: loss, else eval_loss), or '-'."""
    metrics = result["metrics"] if result is not None else {}
    for key in LOSS_METRICS:
        loss = metrics.get(key)
        if isinstance(loss, int | float) and not isinstance(loss, bool) and math.isfinite(loss):
            return f"{loss:.4g}"
    return "-"


def render_summary(keys: tuple[str, ...], rows: list[SummaryRow], stopped: bool) -> str:
    """The sweep's table: run id, each swept key's value, status, step, final loss,
    duration; the reasons under it; a last line of counts."""
    from orchestrator.commands.runs_list import columns

    header = ("RUN ID", *(k.lstrip("+") for k in keys), "STATUS", "STEP", "LOSS", "DURATION")
    table = [header, *((r.run_id, *r.values, r.status, r.step, r.loss, r.duration) for r in rows)]
    lines = columns([tuple(printable(c) for c in line) for line in table])
    notes = [f"{printable(r.run_id)}: {printable(r.reason)}" for r in rows if r.reason]
    if notes:
        lines += ["", *notes]
    done = sum(r.status == "SUCCEEDED" for r in rows)
    not_started = sum(r.status == NOT_STARTED for r in rows)
    tail = f"sweep: {len(rows)} runs, {done} succeeded"
    if stopped:
        tail += f"; stopped by a signal, {not_started} not started"
    lines += ["", tail]
    return "\n".join(lines)


def main(opts: Options) -> int:
    """-m: every run of the sweep composed and checked, then run one after another; with
    --cfg, each run's config printed instead."""
    from pathlib import Path

    from orchestrator.commands.run import check_new_run, check_regions, new_run_id
    from orchestrator.commands.showcfg import cfg_yaml
    from orchestrator.config.compose import CONF_DIR, compose_full, config_groups

    dirs = [CONF_DIR, *(Path(d) for d in opts.config_dirs)]
    swept = expand(opts.overrides, lambda group: config_groups(dirs).get(group, []))
    plan: list[Planned] = []
    shown: list[str] = []
    for i, run in enumerate(named(swept)):
        composed = compose_full(list(run))
        cfg = composed.config
        values = swept.values(i)
        if opts.cfg is not None:
            check_regions(cfg)
            given = " ".join(f"{k}={v}" for k, v in zip(swept.keys, values, strict=True))
            shown.append(f"# run {i + 1} of {len(swept.runs)}: {given}\n{cfg_yaml(composed, opts.cfg)}")
            continue
        if cfg.action is not Action.run:
            raise ConfigError("action", f"a sweep (-m) starts runs (action=run); got action={cfg.action}: drop -m")
        check_new_run(cfg)
        run_id = cfg.run_id or new_run_id(cfg)
        while any(p.run_id == run_id for p in plan):
            run_id = new_run_id(cfg)
        overrides = run if cfg.run_id else (*run, f"run_id={run_id}")
        plan.append(Planned(tuple(overrides), cfg, run_id, values))
    if opts.cfg is not None:
        print("---\n".join(shown).rstrip("\n"))
        return 0
    return run_sweep(plan, swept.keys, runner())
