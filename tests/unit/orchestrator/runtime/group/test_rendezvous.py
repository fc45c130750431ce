"""Which runs keep their survivors, and a worker's assignment from the driver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.runtime.group import rendezvous
from orchestrator.wire.spec import RuntimeSpec

pytestmark = pytest.mark.unit


def spec(tmp_path: Path, **over: Any) -> RuntimeSpec:
    trainer = {"workers": 2, **over.pop("trainer", {})}
    return RuntimeSpec(
        run_id="run-1",
        generation=1,
        region="local-a",
        store_url=f"file://{tmp_path}/store",
        control_url=f"file://{tmp_path}/control",
        ray_address="127.0.0.1:1",
        ray_storage_path=str(tmp_path / "ray"),
        job=over.pop("job", {"name": "digits", "workload": "digits"}),
        trainer=trainer,
        checkpoint={},
        **over,
    )


def test_a_ddp_workload_on_cpus_keeps_its_survivors(tmp_path: Path) -> None:
    assert rendezvous.why_not_survivors(spec(tmp_path)) is None


@pytest.mark.parametrize(
    ("over", "why"),
    [
        ({"survivors": "off"}, "recovery.survivors=off"),
        ({"trainer": {"workers": 1}}, "one worker"),
        ({"trainer": {"strategy": "fsdp"}}, "trainer.strategy=fsdp"),
        ({"trainer": {"gpus_per_worker": 1.0}}, "NCCL"),
        ({"data": {"loader": "ray_data"}}, "ray_data"),
        ({"job": {"name": "f", "workload": "", "train_func": "m:f"}}, "train_func"),
    ],
)
def test_what_restarts_the_whole_group_says_why(tmp_path: Path, over: dict[str, Any], why: str) -> None:
    assert why in (rendezvous.why_not_survivors(spec(tmp_path, **over)) or "")


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"survivors": "off"},
        {"trainer": {"workers": 1}},
        {"trainer": {"strategy": "fsdp"}},
        {"job": {"name": "f", "workload": "", "train_func": "m:f"}},
    ],
)
def test_a_group_restarted_whole_on_cpus_keeps_spares_too(tmp_path: Path, over: dict[str, Any]) -> None:
    assert rendezvous.why_no_spares(spec(tmp_path, **over)) is None


@pytest.mark.parametrize(
    ("over", "why"),
    [({"trainer": {"gpus_per_worker": 1.0}}, "holds no GPU"), ({"data": {"loader": "ray_data"}}, "ray_data")],
)
def test_what_keeps_no_spares_says_why(tmp_path: Path, over: dict[str, Any], why: str) -> None:
    assert why in (rendezvous.why_no_spares(spec(tmp_path, **over)) or "")


def test_one_worker_per_node_watches_its_notices_and_a_replacement_takes_over_a_lost_watch() -> None:
    first = rendezvous.node_watchers({0: "a", 1: "a", 2: "b", 3: "b"}, {})
    assert first == {0: "a", 2: "b"}
    # Rank 2 lost with node b; its replacement lands on a new node c: it watches there.
    assert rendezvous.node_watchers({0: "a", 1: "a", 2: "c", 3: "b"}, first) == {0: "a", 2: "c", 3: "b"}
    # Rank 1 (not a watcher) replaced on node a: the watch stays with rank 0.
    assert rendezvous.node_watchers({0: "a", 1: "a", 2: "b", 3: "b"}, first) == first
