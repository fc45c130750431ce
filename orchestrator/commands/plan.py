"""``action=plan``: what a run would start, region by region in failover order, and what it
would cost, as the run's provider plans it (``Provider.plan``: SkyPilot's optimizer prices
each placement; the local provider lists the Ray clusters it would start on this machine).

Nothing is launched. The files a launch would use (SkyPilot's task YAMLs) are written
under ``<home>/plans/<run_id>/``.
"""

from __future__ import annotations

import os
import sys

from orchestrator.config.schema import Config, Placement
from orchestrator.errors import error
from orchestrator.runstate import rundir
from orchestrator.runstate.runfiles import open_fd


def main(cfg: Config) -> int:
    """Print the plan; 0 when every listed region can run the job, 1 when one cannot, 2 on a
    bad config or without the provider's SDK."""
    import secrets
    import time

    from providers.base import ProviderUnavailable
    from providers.registry import UnknownProvider, get_provider

    run_id = cfg.run_id or f"{cfg.job.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    plan_dir = rundir.plan_path(cfg.home_path, run_id)
    try:
        provider = get_provider(cfg.cloud.provider, cfg.home_path, cfg.cloud, cfg.job)
        plan = provider.plan(cfg, run_id, plan_dir)
    except UnknownProvider as exc:
        return error(exc.args[0])
    except ProviderUnavailable as exc:
        return error(f"cloud.provider: {exc}")
    for path, text in plan.files.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # Never through a link planted in the run's folder (DamagedFile, one line).
        with os.fdopen(open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
            fh.write(text)
    print(f"plan {run_id}: job {cfg.job.name} on {cfg.cloud.name}, placements in failover order")
    for line in plan.lines:
        print(line)
    if cfg.recovery.placement is Placement.cost:
        for line in cost_lines(cfg, rundir.run_path(cfg.home_path, run_id)):
            print(line)
    for line in plan.errors:
        print(line, file=sys.stderr)
    return 1 if plan.errors else 0


def cost_lines(cfg: Config, run_dir: str) -> list[str]:
    """recovery.placement=cost: the candidates by expected cost to finish, best first, as
    the run would place itself now (an existing run's journal: where it has got to, and
    where its newest checkpoint is)."""
    from orchestrator.control.placement import home_exposure, measured, ranking, ranking_lines
    from orchestrator.runstate.journal import DamagedFile, read_typed

    try:
        events = list(read_typed(rundir.journal_path(run_dir))) if os.path.exists(run_dir) else []
    except (DamagedFile, OSError):
        events = []
    m = measured(events)
    past = home_exposure(cfg.home_path, exclude=os.path.basename(run_dir))
    where = f"step {m.newest_step} in {', '.join(sorted(m.holders))}" if m.newest_step and m.holders else "none yet"
    seen = (
        "no earlier run of this home"
        if not past.runs
        else f"{past.runs} earlier run{'s' if past.runs != 1 else ''} of this home"
    )
    return [
        "placement by expected cost to finish (recovery.placement=cost; * where it would go):",
        *ranking_lines(ranking(cfg, events, None, past=past)),
        f"newest checkpoint: {where}",
        f"losses learned from: this run and {seen}",
    ]
