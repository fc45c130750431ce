"""What ``action=plan`` says of a run on the local provider: the Ray cluster it would start
for each candidate region, in failover order, on this machine, at no cost of its own."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from providers.base import Plan

if TYPE_CHECKING:
    from orchestrator.config.schema import Config


def local_plan(cfg: Config) -> Plan:
    header = f"{'#':<3}{'region':<16}{'nodes':>5}  {'CPUs/node':>9}  {'GPUs/node':>9}  {'$/hour':>8}  cluster"
    rows = [header]
    for i, name in enumerate(cfg.candidate_regions(), start=1):
        rc = cfg.cloud.regions[name]
        nodes = rc.node_count()
        what = "ray start --head" + (f" and {nodes - 1} worker node(s)" if nodes > 1 else "") + " on 127.0.0.1"
        rows.append(f"{i:<3}{name:<16}{nodes:>5}  {rc.num_cpus:>9}  {rc.num_gpus:>9}  {0.0:>8.4f}  {what}")
    cpus = os.cpu_count() or 1
    return Plan(
        (
            *rows,
            f"machine      this one: {cpus} CPU(s); a region's cluster starts when the run reaches it "
            "(two at once while a failover overlaps, or with recovery.standby)",
            "cost         $0/hour: local clusters are this machine's processes",
        )
    )
