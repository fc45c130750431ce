"""Every drill in conf/chaos/ composes to the faults the README promises. The drills whose
faults the invariant matrix already runs for real (tests/chaos/test_matrix.py) are checked
here; the others also run from the CLI (tests/chaos/test_drills.py)."""

from __future__ import annotations

from orchestrator.config.compose import compose
from tests.support.paths import REPO

CHAOS = REPO / "conf" / "chaos"


def faults(drill: str) -> list[tuple[str, int | None, str | None]]:
    cfg = compose([f"chaos={drill}"])
    return [(f.kind, f.at_step, f.during) for f in cfg.chaos.faults]


def test_every_drill_composes() -> None:
    for path in CHAOS.glob("*.yaml"):
        compose([f"chaos={path.stem}"])


def test_region_outage_is_double_region_losss_first_fault() -> None:
    assert faults("region_outage") == [("kill_region", 60, None)]
    assert faults("double_region_loss")[0] == faults("region_outage")[0]
    assert faults("double_region_loss") == [("kill_region", 60, None), ("kill_region", 220, None)]


def test_spot_storm_is_three_preemptions_without_cooldown() -> None:
    cfg = compose(["chaos=spot_storm"])
    assert [(f.kind, f.at_step) for f in cfg.chaos.faults] == [("preempt", 100), ("preempt", 220), ("preempt", 340)]
    assert cfg.recovery.region_cooldown_s == 0
    assert all(f.grace_s == 20 for f in cfg.chaos.faults)


def test_worker_loss_kills_one_worker_after_the_first_checkpoint() -> None:
    assert faults("worker_loss") == [("kill_worker", 50, None)]


def test_controller_crash_and_the_soak() -> None:
    assert faults("controller_crash") == [("controller_crash", 150, None)]
    soak = compose(["chaos=soak"]).chaos.faults
    assert {f.kind for f in soak} >= {"kill_worker", "corrupt_checkpoint", "preempt", "kill_region"}
    assert sum(f.repeat for f in soak) >= 20 and all(f.random is not None for f in soak)
