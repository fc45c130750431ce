"""What ``action=plan`` says of a run on SkyPilot: its placements, in failover order, priced
by SkyPilot's optimizer.

Nothing is launched and no API server is started: each candidate region's task (the one
``launch`` would use, :func:`providers.skypilot.task.task_config`) goes through SkyPilot's
optimizer in this process, which reads the cloud catalogs (cached CSVs under
``~/.sky/catalogs``; SkyPilot fetches them when missing; offline, the snapshot shipped in
``providers/skypilot/catalogs`` stands in, its date printed). The optimizer only plans on
clouds it believes enabled; a plan is a dry run, so it is told the plan's clouds are, and
the credentials are reported beside the table (a run checks them and stops without).

Each placement's task YAML goes in the plan's files; ``sky launch`` takes it unchanged
(secrets appear by name only).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from providers.base import Plan

if TYPE_CHECKING:
    from orchestrator.config.schema import Config


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


def make_plan(cfg: Config, run_id: str, out_dir: str) -> tuple[list[Placement], dict[str, str]]:
    """Each candidate region's placement, and its task YAML (path under ``out_dir`` -> text)."""
    import yaml

    from orchestrator.wire.spec import TRAIN_ENV
    from providers.skypilot.credentials import split_secrets
    from providers.skypilot.errors import one_line
    from providers.skypilot.regions import cloud_of
    from providers.skypilot.task import task_config

    workdir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    envs, secrets = split_secrets(dict(TRAIN_ENV))
    regions = cfg.candidate_regions()
    placements: list[Placement] = []
    files: dict[str, str] = {}
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
            files[path] = yaml.safe_dump(config, sort_keys=False)
            p = Placement(i, region, rc.infra, use_spot=rc.use_spot, num_nodes=rc.node_count(), yaml_path=path)
            try:
                with _quiet():
                    best = optimize_task(config)
            except Exception as exc:
                p.unavailable = f"{type(exc).__name__}: {one_line(exc)}"
                placements.append(p)
                continue
            p.cloud_region = best.region
            p.instance_type = best.instance_type
            acc = best.accelerators or {}
            p.accelerators = ",".join(f"{k}:{v:g}" for k, v in acc.items()) or None
            p.hourly_cost = float(best.get_cost(3600)) * rc.node_count()
            placements.append(p)
    return placements, files


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


def skypilot_plan(cfg: Config, run_id: str, out_dir: str) -> Plan:
    """The placements' table, the catalogs it was priced from, each cloud's credentials
    and where the task YAMLs go; SkyPilotMissing (ProviderUnavailable) without SkyPilot."""
    from providers.skypilot.catalog import use_catalogs
    from providers.skypilot.regions import cloud_of
    from providers.skypilot.sdk import import_sky

    import_sky()
    catalogs = use_catalogs({cloud_of(cfg.cloud.regions[r]) for r in cfg.candidate_regions()})
    placements, files = make_plan(cfg, run_id, out_dir)
    notes = credentials_notes(cfg)
    lines = [
        *render(placements).splitlines(),
        f"catalogs     {catalogs.describe()}",
        *(f"credentials  {note}" for note in notes),
        f"task YAML: {out_dir} (sky launch <file> takes each)",
    ]
    return Plan(tuple(lines), tuple(unavailable_lines(placements)), files)
