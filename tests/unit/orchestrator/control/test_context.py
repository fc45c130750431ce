"""What an attempt runs in (orchestrator/control/context.py): cluster names and a region's
storage options, through its fault proxy when the run has one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.config.compose import compose
from orchestrator.control.context import RunContext, store_options

pytestmark = pytest.mark.unit


def _context(**fields: Any) -> RunContext:
    cfg = compose(["cloud=local"])
    return RunContext("run-1", "/tmp/run-1", cfg, provider=None, control=None, emit=lambda *a, **k: None, **fields)  # type: ignore[arg-type]


def test_a_clusters_name_is_the_runs_its_regions_and_its_generation() -> None:
    assert _context().cluster_name("local-a", 3) == "run-1-local-a-g3"


def test_a_regions_options_are_its_own_unless_a_proxy_stands_in_front_of_its_store() -> None:
    ctx = _context()
    region = next(iter(ctx.cfg.cloud.regions))
    own = dict(ctx.cfg.cloud.regions[region].storage_options)
    assert ctx.store_options(region) == own
    proxied = store_options(ctx.cfg, {region: SimpleNamespace(endpoint="http://127.0.0.1:9")}, region)
    assert proxied == {**own, "endpoint_url": "http://127.0.0.1:9"}
    assert ctx.cfg.cloud.regions[region].storage_options == own, "the config's options were changed"


def test_by_default_progress_metrics_and_replication_do_nothing() -> None:
    ctx = _context()
    ctx.progress.note("x")
    ctx.progress.update("local-a", 1, {})
    ctx.metrics.progress({})
    ctx.replicator.follow(None, [])  # type: ignore[arg-type]
