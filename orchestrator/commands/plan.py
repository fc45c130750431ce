"""``action=plan``: the job's placements, in failover order, priced by SkyPilot's optimizer.

Nothing is launched and no API server is started: each candidate region's task (the one
``launch`` would use, :func:`providers.skypilot.task.task_config`) goes through SkyPilot's
optimizer in this process, which reads the cloud catalogs (cached CSVs under
``~/.sky/catalogs``; SkyPilot fetches them when missing; offline, the snapshot shipped in
``providers/skypilot/catalogs`` stands in, its date printed). The optimizer only plans on
clouds it believes enabled; a plan is a dry run, so it is told the plan's clouds are, and
the credentials are reported beside the table (a run checks them and stops without).

For each placement the task YAML is written under ``<home>/plans/<run_id>/``;
``sky launch`` takes it unchanged (secrets appear by name only).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from orchestrator.config.schema import Config
from orchestrator.errors import ConfigError
from orchestrator.runstate import rundir
from orchestrator.runstate.runfiles import open_fd


@dataclass
class Placement:
    order: int
    region: str
    infra: str
    cloud_region: str | None = None
    instance_type: str | None = None
    accelerators: str | None = None
    use_spot: bool = False
    num_nodes: int = 1
    hourly_cost: float | None = None  # all nodes, USD per hour
    yaml_path: str = ""
    unavailable: str | None = None  # why the optimizer found nothing


@contextlib.contextmanager
def plan_clouds(names: set[str]) -> Iterator[None]:
    """Let SkyPilot's optimizer plan on these clouds whatever their credentials (the same
    two checks SkyPilot's own tests patch: the enabled-cloud cache and ``sky check``)."""
    from unittest import mock

    from sky import check, clouds

    enabled = [getattr(clouds, n)() for n in sorted(names)]
    with (
        mock.patch.object(check, "get_cached_enabled_clouds_or_refresh", lambda *a, **k: enabled),
        mock.patch.object(check, "check_capability", lambda *a, **k: None),
        mock.patch.object(check, "check", lambda *a, **k: None),
    ):
        yield


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """SkyPilot logs its own table and spinners; the plan prints its own."""
    logger = logging.getLogger("sky")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)


def optimize_task(config: dict[str, Any]) -> Any:
    """The Resources SkyPilot's optimizer picks for one task config (cost minimised)."""
    import sky
    from sky import optimizer

    from providers.skypilot.sdk import build_task

    with sky.Dag() as dag:
        task = build_task(config)
    optimizer.Optimizer.optimize(dag, minimize=sky.OptimizeTarget.COST, quiet=True)
    return task.best_resources


def make_plan(cfg: Config, run_id: str) -> list[Placement]:
    import yaml

    from providers.skypilot.credentials import split_secrets
    from providers.skypilot.regions import cloud_of
    from providers.skypilot.task import task_config

    out_dir = rundir.plan_path(cfg.home_path, run_id)
    os.makedirs(out_dir, exist_ok=True)
    workdir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from orchestrator.wire.spec import TRAIN_ENV

    envs, secrets = split_secrets(dict(TRAIN_ENV))
    regions = cfg.candidate_regions()
    placements: list[Placement] = []
    with plan_clouds({cloud_of(cfg.cloud.regions[r]) for r in regions}):
        for i, region in enumerate(regions, start=1):
            rc = cfg.cloud.regions[region]
            config = task_config(
                region,
                rc,
                f"{run_id}-{region}-g1",
                envs,
                workdir=workdir,
                secret_names=tuple(sorted(secrets)),
                code_dir=cfg.job.code_dir,
            )
            path = os.path.join(out_dir, f"{i:02d}-{region}.yaml")
            # Never through a link planted in the run's folder (DamagedFile, one line).
            with os.fdopen(open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
                yaml.safe_dump(config, fh, sort_keys=False)
            p = Placement(i, region, rc.infra, use_spot=rc.use_spot, num_nodes=rc.node_count(), yaml_path=path)
            try:
                with _quiet():
                    best = optimize_task(config)
            except Exception as exc:
                from providers.skypilot.errors import one_line

                p.unavailable = f"{type(exc).__name__}: {one_line(exc)}"
                placements.append(p)
                continue
            p.cloud_region = best.region
            p.instance_type = best.instance_type
            acc = best.accelerators or {}
            p.accelerators = ",".join(f"{k}:{v:g}" for k, v in acc.items()) or None
            p.hourly_cost = float(best.get_cost(3600)) * rc.node_count()
            placements.append(p)
    return placements


def credentials_notes(cfg: Config) -> list[str]:
    from providers.base import ProvisionError
    from providers.skypilot.credentials import precheck
    from providers.skypilot.regions import cloud_of

    notes, seen = [], set()
    for region in cfg.candidate_regions():
        rc = cfg.cloud.regions[region]
        if cloud_of(rc) in seen:
            continue
        seen.add(cloud_of(rc))
        try:
            with _quiet():
                precheck({region: rc})
            notes.append(f"{cloud_of(rc)}: credentials found")
        except ProvisionError as exc:
            notes.append(f"{cloud_of(rc)}: {str(exc).split(': ', 1)[-1]}; a run would stop before launching")
    return notes


def render(placements: list[Placement]) -> str:
    lines = [
        f"{'#':<3}{'region':<16}{'infra':<24}{'instance':<16}{'accelerators':<14}{'nodes':>5}  {'$/hour':>8}  task",
    ]
    for p in placements:
        if p.unavailable:
            lines.append(f"{p.order:<3}{p.region:<16}{p.infra:<24}unavailable: {p.unavailable}")
            continue
        cost = "-" if p.hourly_cost is None else f"{p.hourly_cost:.4f}"
        spot = " (spot)" if p.use_spot else ""
        lines.append(
            f"{p.order:<3}{p.region:<16}{p.infra:<24}{(p.instance_type or '-') + spot:<16}"
            f"{p.accelerators or '-':<14}{p.num_nodes:>5}  {cost:>8}  {p.yaml_path}"
        )
    return "\n".join(lines)


def unavailable_lines(placements: list[Placement]) -> list[str]:
    """One line per region the config lists that cannot run the job, and why."""
    return [
        f"error: cloud.regions.{p.region}: cannot run the job: {p.unavailable}" for p in placements if p.unavailable
    ]


def main(cfg: Config) -> int:
    """Print the plan; 0 when every listed region can run the job, 1 when one cannot, 2 on a
    bad config or without SkyPilot."""
    import secrets
    import time

    if cfg.cloud.provider != "skypilot":
        raise_cfg = ConfigError(
            "cloud",
            f"action=plan prices SkyPilot placements; cloud {cfg.cloud.name!r} uses provider "
            f"{str(cfg.cloud.provider)!r}: pick cloud=aws, gcp, onprem or multi",
        )
        print(f"error: {raise_cfg}", file=sys.stderr)
        return 2
    from providers.skypilot.sdk import SkyPilotMissing, import_sky

    try:
        import_sky()
    except SkyPilotMissing as exc:
        print(f"error: cloud.provider: {exc}", file=sys.stderr)
        return 2
    from providers.skypilot.catalog import use_catalogs
    from providers.skypilot.regions import cloud_of

    run_id = cfg.run_id or f"{cfg.job.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    catalogs = use_catalogs({cloud_of(cfg.cloud.regions[r]) for r in cfg.candidate_regions()})
    placements = make_plan(cfg, run_id)
    notes = credentials_notes(cfg)
    print(f"plan {run_id}: job {cfg.job.name} on {cfg.cloud.name}, placements in failover order")
    print(render(placements))
    print(f"catalogs     {catalogs.describe()}")
    for note in notes:
        print(f"credentials  {note}")
    plan_dir = rundir.plan_path(cfg.home_path, run_id)
    print(f"task YAML: {plan_dir} (sky launch <file> takes each)")
    bad = unavailable_lines(placements)
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0
