"""benchmarks/console.py: its figures, and one small home timed in-process."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from benchmarks import console
from tests.support.console_runs import make_home
from tests.unit.benchmarks.test_common import written

pytestmark = pytest.mark.unit


def test_the_figures_give_each_time_and_the_ratio_to_the_goal(tmp_path: Path) -> None:
    m = {
        "list_runs": (1.2, 1.0),
        "api_cold": (1.5, 1.1),
        "api_warm": (0.1, 0.1),
        "html_cold": (1.8, 1.3),
        "html_warm": (0.3, 0.2),
    }
    out = written(tmp_path, console.figures(1000, m, 0.5))
    assert out["runs"] == 1000 and out["goal_s"] == 2.0 and out["load_average"] == 0.5
    assert (out["api_cold_s"], out["api_cold_cpu_s"], out["html_warm_s"]) == (1.5, 1.1, 0.3)
    assert (out["ratio_cold"], out["ratio_cold_cpu"], out["ratio_warm"], out["cold_over_list"]) == (
        0.9,
        0.65,
        0.15,
        1.5,
    )
    assert out["goal_met"] is True and out["goal_met_warm"] is True
    assert console.figures(10, {**m, "api_cold": (2.5, 1.0)})["goal_met"] is False


def test_the_arguments_and_their_defaults() -> None:
    args = console.parse_args([])
    assert (args.runs, args.repeat, args.json) == (1000, 5, None)
    assert console.parse_args(["--runs", "3", "--json", "x.json"]).json == "x.json"


def test_a_small_home_is_timed_through_the_apps_own_routes(tmp_path: Path) -> None:
    make_home(tmp_path, 4, time.time(), console.MIX)
    m = console.measure(tmp_path, 1)
    assert set(m) == {"list_runs", "api_cold", "api_warm", "html_cold", "html_warm"}
    assert all(wall > 0 for wall, _ in m.values())
    from orchestrator.console.app import Console, build
    from orchestrator.console.security import Secrets

    keys = Secrets.new()
    app = build(Console(str(tmp_path), keys))
    assert console.asgi_get(app, "/api/runs")[0] == 401
    status, body = console.asgi_get(app, "/api/runs?status=SUCCEEDED", f"{keys.cookie}={keys.token}")
    assert status == 200 and {r["status"] for r in json.loads(body)["runs"]} == {"SUCCEEDED"}
