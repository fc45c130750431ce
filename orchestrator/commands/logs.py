"""``action=logs``: what an attempt's driver and ranks printed, from the run's folder.

Each attempt's folder (``attempts/g<N>/``) holds the driver's log (``runtime.log``,
written there as it runs) and, once the attempt's cluster is torn down, the copies of
its ranks' logs (``rank-<R>.log``, capped: orchestrator/wire/logfiles.py). While an
attempt runs on this machine (a provider with Capability.LOCAL_PROCESSES), its ranks' files are read
where the workers write them. The journal says which attempt ran where, and what was
kept of each (``logs_kept``: the ranks, or why none, e.g. a cluster lost with its nodes).

Nothing here writes: it reads the run's folder as ``action=status`` does.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from orchestrator.config.schema import Config
from orchestrator.control.livelogs import DRIVER, Tail
from orchestrator.errors import EXIT_INTERRUPTED, ConfigError, error
from orchestrator.runstate import rundir
from orchestrator.runstate.events import (
    AttemptAdopted,
    AttemptEnded,
    AttemptStarted,
    LogsKept,
    Provisioned,
    RunStarted,
)
from orchestrator.runstate.journal import DamagedFile, load_json, read_typed
from orchestrator.runstate.result import read_result
from orchestrator.runstate.rundir import ATTEMPTS_DIR, DRIVER_LOG, attempt_dir, controller_alive
from orchestrator.wire.logfiles import rank_files, read_capped

FOLLOW_POLL_S = 0.5
_ATTEMPT_DIR = re.compile(r"g([1-9][0-9]{0,8})")


@dataclass
class AttemptFacts:
    """One attempt as the run's folder tells it."""

    generation: int
    region: str | None = None
    # Ranks the attempt's spec asked for (trainer.workers); None: unknown, or a search.
    workers: int | None = None
    search: bool = False
    # Where its ranks write while it runs (the cluster's log folder).
    live_dir: str | None = None
    kept: LogsKept | None = None
    ended: bool = False


@dataclass
class RunFacts:
    run_dir: str
    attempts: dict[int, AttemptFacts] = field(default_factory=dict)
    # The clusters' folders are on this machine (its provider's Capability.LOCAL_PROCESSES).
    local: bool = False


@dataclass(frozen=True)
class Source:
    """One log of an attempt: a file to read, or why there is none (``note``)."""

    generation: int
    label: str  # "driver" or "rank <R>"
    path: str | None
    note: str | None = None


def attempt_numbers(run_dir: str) -> list[int]:
    """The attempts that have a folder (each started its runtime), oldest first."""
    try:
        names = os.listdir(os.path.join(run_dir, ATTEMPTS_DIR))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(m.group(1)) for n in names if (m := _ATTEMPT_DIR.fullmatch(n)))


def clusters_here(provider: object) -> bool:
    """Whether the clusters of the provider a run's config names are on this machine."""
    from providers.base import Capability
    from providers.registry import UnknownProvider, capabilities_of

    try:
        return Capability.LOCAL_PROCESSES in capabilities_of(str(provider))
    except UnknownProvider:
        return False


def read_facts(run_dir: str, events: Iterable[Any] | None = None) -> RunFacts:
    """What the run's folder says of each attempt's logs. ``events``: the journal's,
    typed (read from the run's journal when not given). An attempt is one the journal
    says started (a warm standby that was never activated is none) and that has a
    folder (its runtime was started)."""
    folders = attempt_numbers(run_dir)
    facts = RunFacts(run_dir, {g: AttemptFacts(g) for g in folders})
    if events is None:
        events = read_typed(rundir.journal_path(run_dir))
    started: set[int] = set()
    events = list(events)
    for ev in events:
        if isinstance(ev, AttemptStarted | AttemptAdopted):
            started.add(ev.generation)
    facts.attempts = {g: a for g, a in facts.attempts.items() if g in started}
    for ev in events:
        if isinstance(ev, RunStarted):
            cloud = (ev.config or {}).get("cloud")
            facts.local = isinstance(cloud, dict) and clusters_here(cloud.get("provider"))
            continue
        gen = getattr(ev, "generation", None)
        if not isinstance(gen, int) or gen not in facts.attempts:
            continue
        a = facts.attempts[gen]
        if isinstance(ev, Provisioned):
            a.region = ev.region
            log_dir = (ev.info or {}).get("log_dir")
            a.live_dir = log_dir if isinstance(log_dir, str) and log_dir else None
        elif isinstance(ev, LogsKept):
            a.kept = ev
        elif isinstance(ev, AttemptEnded):
            a.ended = True
            a.region = a.region or ev.region
    for a in facts.attempts.values():
        a.workers, a.search = _spec_ranks(os.path.join(attempt_dir(run_dir, a.generation), "spec.json"))
    return facts


def _spec_ranks(path: str) -> tuple[int | None, bool]:
    """(trainer.workers, whether it is a search) of an attempt's spec; (None, False)
    when it cannot be read: the rank files alone then say which ranks there are."""
    try:
        spec = load_json(path)
        workers = spec["trainer"]["workers"]
        search = spec.get("hpo") is not None
    except (OSError, DamagedFile, KeyError, TypeError, AttributeError):
        return None, False
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 100_000:
        return None, search
    return workers, search


def missing_note(a: AttemptFacts, live_here: bool) -> str:
    """Why a rank of attempt ``a`` has no log to show."""
    if a.kept is not None and a.kept.error:
        return f"not kept: {a.kept.error}"
    if a.kept is not None:
        return "no output (the rank wrote nothing, or never started)"
    if not a.ended and not live_here:
        return "the attempt runs on its cluster; its ranks' logs are fetched when it ends"
    if not a.ended:
        return "no output yet"
    return "not kept yet: they are copied when the attempt's cluster is torn down"


def sources(facts: RunFacts, generation: int) -> list[Source]:
    """The driver's log and each rank's of one attempt, in that order."""
    a = facts.attempts[generation]
    folder = attempt_dir(facts.run_dir, generation)
    driver = os.path.join(folder, DRIVER_LOG)
    out = [
        Source(generation, DRIVER, driver)
        if os.path.isfile(driver) and not os.path.islink(driver)
        else Source(generation, DRIVER, None, "no driver log (its runtime never started)")
    ]
    if a.search:
        out.append(Source(generation, "ranks", None, "a search keeps its driver's log only"))
        return out
    kept = rank_files(folder)
    live_here = facts.local and a.live_dir is not None and a.kept is None
    live = rank_files(a.live_dir) if live_here and a.live_dir else {}
    for rank in sorted(set(range(a.workers or 0)) | set(kept) | set(live)):
        path = kept.get(rank) or live.get(rank)
        note = None if path else missing_note(a, live_here)
        out.append(Source(generation, f"rank {rank}", path, note))
    return out


def choose_attempt(run_id: str, facts: RunFacts, wanted: int | None) -> int:
    """The attempt asked for, or the newest; ConfigError naming ``attempt`` otherwise."""
    have = sorted(facts.attempts)
    if wanted is None:
        if not have:
            raise ConfigError("attempt", f"run {run_id!r} has no attempt yet; add follow=true to wait for its first")
        return have[-1]
    if wanted not in facts.attempts:
        known = f"its attempts: {', '.join(map(str, have))}" if have else "it has no attempt yet"
        raise ConfigError("attempt", f"run {run_id!r} has no attempt {wanted}; {known}")
    return wanted


def choose_sources(found: list[Source], rank: str | None) -> list[Source]:
    """The logs ``rank`` names: the driver's, one rank's, or all (None)."""
    if rank is None:
        return found
    label = DRIVER if rank == DRIVER else f"rank {int(rank)}"
    chosen = [s for s in found if s.label == label]
    if not chosen:
        ranks = [s.label.removeprefix("rank ") for s in found if s.label.startswith("rank ")]
        gen = found[0].generation if found else "?"
        has = f"ranks {', '.join(ranks)} and the driver" if ranks else "the driver's log only"
        raise ConfigError("rank", f"attempt {gen} has no rank {rank}; it has {has}")
    return chosen


def header(a: AttemptFacts, src: Source) -> str:
    where = f" ({a.region})" if a.region else ""
    what = src.path if src.path is not None else src.note
    return f"==> attempt {a.generation}{where}, {src.label}: {what} <=="


def render(facts: RunFacts, chosen: list[Source], out: TextIO) -> None:
    """The chosen logs, whole (as kept, or capped as a kept copy would be); a header
    before each when there are several, a log that is not there said in one line."""
    for i, src in enumerate(chosen):
        a = facts.attempts[src.generation]
        if len(chosen) > 1:
            out.write(("\n" if i else "") + header(a, src) + "\n")
        if src.path is None:
            if len(chosen) == 1:
                out.write(f"attempt {src.generation}, {src.label}: {src.note}\n")
            continue
        try:
            data, _ = read_capped(src.path)
        except OSError as exc:
            out.write(f"attempt {src.generation}, {src.label}: cannot be read ({exc.strerror or exc})\n")
            continue
        text = data.decode(errors="replace")
        out.write(text if not text or text.endswith("\n") else text + "\n")


def show(run_dir: str, run_id: str, attempt: int | None, rank: str | None, out: TextIO) -> None:
    """``action=logs`` without follow; ConfigError naming run_id, attempt or rank."""
    if not os.path.isdir(run_dir):
        raise ConfigError("run_id", f"no run named {run_id!r} under {os.path.dirname(os.path.dirname(run_dir))}")
    facts = read_facts(run_dir)
    gen = choose_attempt(run_id, facts, attempt)
    render(facts, choose_sources(sources(facts, gen), rank), out)


# --- following files as they grow -----------------------------------------------------------------


def run_over(run_dir: str) -> bool:
    """The run has ended (result.json), or no controller runs it (it died: nothing more comes)."""
    return read_result(run_dir) is not None or controller_alive(run_dir) is False


@dataclass
class Follow:
    """``follow=true``: the run's logs from attempt ``start`` on, each line as it is
    written, moving on to each new attempt, until the run ends. ``rank``: one log only
    (its lines unprefixed), or every log, each line prefixed with its source."""

    run_dir: str
    start: int
    rank: str | None
    out: TextIO
    tail: Tail = field(default_factory=Tail)
    _headed: int | None = None
    _noted: set[tuple[int, str]] = field(default_factory=set)
    _journal: tuple[int, RunFacts | None] = (-1, None)

    def facts(self) -> RunFacts:
        """The run's facts, read again only when the journal grew (or an attempt began)."""
        path = rundir.journal_path(self.run_dir)
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        seen, cached = self._journal
        if cached is None or size != seen or attempt_numbers(self.run_dir) != sorted(cached.attempts):
            cached = read_facts(self.run_dir)
            self._journal = (size, cached)
        return cached

    def poll(self, final: bool = False) -> None:
        facts = self.facts()
        for gen in sorted(g for g in facts.attempts if g >= self.start):
            a = facts.attempts[gen]
            found = sources(facts, gen)
            try:
                chosen = choose_sources(found, self.rank)
            except ConfigError:
                continue  # this attempt has no such rank (yet)
            for src in chosen:
                prefix = "" if self.rank is not None else f"[{src.label}] "
                if src.path is None:
                    # Said once, when it is final: the attempt's logs were kept (or not).
                    if a.kept is not None and (gen, src.label) not in self._noted:
                        self._noted.add((gen, src.label))
                        self._head(a)
                        self.out.write(f"-- attempt {gen}, {src.label}: {src.note}\n")
                    continue
                key = (gen, src.label)
                lines = self.tail.read(key, src.path)
                # A last line with no newline is whole once nothing more comes: the run
                # ended, or the attempt did (its logs were kept).
                rest = self.tail.rest(key) if final or a.kept is not None else None
                if lines or rest:
                    self._head(a)
                self.out.writelines(f"{prefix}{line}\n" for line in lines)
                if rest:
                    self.out.write(f"{prefix}{rest}\n")
        self.out.flush()

    def _head(self, a: AttemptFacts) -> None:
        """A header before the lines of an attempt other than the last lines' one."""
        if a.generation != self._headed:
            self._headed = a.generation
            where = f" ({a.region})" if a.region else ""
            self.out.write(f"==> attempt {a.generation}{where} <==\n")

    def run(self, poll_s: float = FOLLOW_POLL_S, over: Callable[[str], bool] = run_over) -> None:
        while True:
            ended = over(self.run_dir)  # asked first: the poll after it sees all there was
            self.poll(final=ended)
            if ended:
                return
            time.sleep(poll_s)


def follow(
    run_dir: str, run_id: str, attempt: int | None, rank: str | None, out: TextIO, poll_s: float = FOLLOW_POLL_S
) -> None:
    """``action=logs follow=true``: from the attempt asked for (default: the newest, or
    the first to come) to the run's end; ConfigError naming run_id or attempt."""
    if not os.path.isdir(run_dir):
        raise ConfigError("run_id", f"no run named {run_id!r} under {os.path.dirname(os.path.dirname(run_dir))}")
    facts = read_facts(run_dir)
    start = choose_attempt(run_id, facts, attempt) if attempt is not None or facts.attempts else 1
    Follow(run_dir, start, rank, out).run(poll_s)


def main(cfg: Config) -> int:
    """``action=logs``: an attempt's driver and ranks' output, or followed to the run's end."""
    import sys

    run_dir = rundir.run_path(cfg.home_path, str(cfg.run_id))
    try:
        if cfg.follow:
            follow(run_dir, str(cfg.run_id), cfg.attempt, cfg.rank, sys.stdout)
        else:
            show(run_dir, str(cfg.run_id), cfg.attempt, cfg.rank, sys.stdout)
    except ConfigError as exc:
        return error(str(exc))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED  # Ctrl-C ends a follow: nothing to clean up
    # `action=logs ... | head`: a reader that leaves ends it quietly (commands/output.py).
    return 0
