"""The regions page: each region across the home's runs, folded from their journals."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.console.regions import HomeRegions, RunRegions, fold_run, region_json, region_rows
from orchestrator.runstate import events as E
from tests.support.console_runs import make_run

pytestmark = pytest.mark.unit


def test_a_runs_journal_by_region() -> None:
    cfg = {"cloud": {"regions": {"a": {"hourly_cost": 0.5}, "b": {}, "bad": "x"}}}
    run = fold_run(
        "r1",
        [
            E.RunStarted(ts=10.0, run_id="r1", config=cfg),
            E.AttemptStarted(ts=11.0, generation=1, region="a"),
            E.ProvisionRetry(ts=12.0, region="a", error="busy"),
            E.Provisioned(ts=20.0, region="a", cluster="c", provision_s=8.0, generation=1),
            E.Provisioned(ts=21.0, region="a", cluster="s", provision_s=99.0, purpose="pool"),
            E.Provisioned(ts=22.0, region="a", cluster="k", provision_s=0.1, generation=2, kept_from=1),
            E.FailureDetected(ts=30.0, kind="user_error", region="a"),
            E.FailureDetected(ts=31.0, kind="cluster_lost", region="a", detail="gone"),
            E.NodeLost(ts=32.0, region="a", generation=1, node=2, health="DOWN"),
            E.ProvisionFailed(ts=40.0, region="b", kind="no_capacity", error="none left"),
        ],
    )
    a, b = run.regions["a"], run.regions["b"]
    assert (a.attempts, a.provision_s, a.refused) == (1, [(20.0, 8.0)], 1)
    assert [(f.kind, f.detail) for f in a.failures] == [("cluster_lost", "gone"), ("node_lost", "node 2: DOWN")]
    assert (b.refused, [f.kind for f in b.failures]) == (1, ["no_capacity"])
    assert set(run.config) == {"a", "b"} and run.started_at == 10.0


def test_regions_across_runs_priced_by_the_newest_run_that_names_them() -> None:
    old = fold_run(
        "old", [E.RunStarted(ts=1.0, run_id="old", config={"cloud": {"regions": {"a": {"hourly_cost": 1}}}})]
    )
    new = fold_run(
        "new",
        [
            E.RunStarted(ts=2.0, run_id="new", config={"cloud": {"regions": {"a": {"hourly_cost": 2}}}}),
            E.AttemptStarted(ts=3.0, generation=1, region="a"),
        ],
    )
    for order in ([old, new], [new, old]):
        (row,) = region_rows(order)
        assert row.price == "$2/node-h" and row.price_source == "cloud.regions.a.hourly_cost" and row.runs == 1
    (unpriced,) = region_rows([RunRegions(0.0, {}, {"z": {}})])
    assert unpriced.price == "-" and "hourly_cost" in unpriced.price_source


def test_a_region_as_the_page_shows_it(tmp_path: Path) -> None:
    now = time.time()
    for i, shape in enumerate(("failover", "failed", "clean")):
        make_run(tmp_path, f"r{i}", shape, t0=now - 100 * (i + 1))
    regions = {r["name"]: r for r in HomeRegions(str(tmp_path)).regions(now)}
    a = regions["local-a"]
    assert (a["runs"], a["attempts"], a["failures"], a["provisions"]) == (3, 3, 2, 3)
    assert a["provision_median"] == "8.0s" and a["price"] == "$0.2/node-h"
    assert [f["run_id"] for f in a["recent"]] == ["r0", "r1"] and a["recent"][0]["href"] == "/runs/r0"
    assert regions["local-c"]["runs"] == 0 and regions["local-c"]["price"] == "$0.4/node-h"


def test_runs_are_folded_again_only_when_their_journal_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import orchestrator.console.regions as regions

    now = time.time()
    make_run(tmp_path, "r", "clean", t0=now - 100)
    (tmp_path / "runs" / "empty").mkdir()
    (tmp_path / "runs" / "damaged").mkdir()
    (tmp_path / "runs" / "damaged" / "journal.jsonl").write_bytes(b'{"ts": 1, "type": 5}\n')
    folded: list[str] = []
    real = regions.fold_run
    monkeypatch.setattr(regions, "fold_run", lambda run_id, events: folded.append(run_id) or real(run_id, events))
    home = HomeRegions(str(tmp_path))
    home.regions(now)
    home.regions(now)
    assert sorted(folded) == ["damaged", "r"]  # each once; the damaged one is not read again either
    assert region_json(regions.RegionRow("x"), now)["provisions"] == 0
