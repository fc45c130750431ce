"""A trial's id, inputs and checkpoint folder."""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from orchestrator.runtime.loop.worker import UserCodeError
from orchestrator.runtime.search.snapshot import CHECKPOINT_FILES, MAX_METRICS
from orchestrator.runtime.search.trial import (
    INDEX,
    TrialLoop,
    eval_metrics,
    load_tensors,
    read_trial_checkpoint,
    scale_lr,
    trial_id_of,
    trial_inputs,
    trial_sections,
)
from orchestrator.wire.sections import DataSection, HpoSection, JobSection, TrainerSection

pytestmark = pytest.mark.unit


def test_a_trials_id_is_its_index_in_the_search() -> None:
    assert trial_id_of(SimpleNamespace(config={INDEX: 3})) == "trial_00003"
    assert trial_id_of(SimpleNamespace(config={INDEX: "12"})) == "trial_00012"


def test_a_checkpoint_folder_is_read_file_by_file(tmp_path: Path) -> None:
    for name in CHECKPOINT_FILES:
        (tmp_path / name).write_bytes(name.encode())
    (tmp_path / "extra.json").write_text("{}")  # Tune's own: not part of a trial's checkpoint
    assert read_trial_checkpoint(str(tmp_path)) == {n: n.encode() for n in CHECKPOINT_FILES}
    (tmp_path / "state.pt").unlink()
    with pytest.raises(FileNotFoundError):
        read_trial_checkpoint(str(tmp_path))


def test_every_trial_gets_the_job_the_data_the_values_and_the_control_channel() -> None:
    spec = SimpleNamespace(
        job="J",
        trainer="T",
        data="D",
        control_url="file:///c",
        control_options={"k": 1},
        generation=4,
        ray_storage_path="/scratch",
    )
    got = trial_inputs(spec, "H", [{"lr": 0.1}])  # type: ignore[arg-type]
    assert got == {
        "hpo": "H",
        "job": "J",
        "trainer": "T",
        "data": "D",
        "configs": [{"lr": 0.1}],
        "control_url": "file:///c",
        "control_options": {"k": 1},
        "generation": 4,
        "scratch": "/scratch",
    }


# --- the trial's loop ---------------------------------------------------------------------------

TINY = "tests.fixtures.tinywork:Tiny"  # a dataset() workload with a scheduler and state of its own


def runtime(values: dict[str, Any], max_t: int = 4, **job: Any) -> dict[str, Any]:
    return {
        "hpo": HpoSection(enabled=True, metric="accuracy", max_t=max_t, steps_per_iteration=3),
        "job": JobSection(name="t", workload=TINY, params={"samples": 256, "step_size": 4}, batch_size=16, **job),
        "trainer": TrainerSection(workers=1),
        "data": DataSection(),
        "configs": [values],
    }


def test_a_trials_values_land_at_their_paths_and_the_runs_sections_stay_as_they_were() -> None:
    rt = runtime({"job.params.hidden": 8, "lr": 0.5, "trainer.grad_clip_norm": 1.5, "data.samples": 99})
    job, trainer, data = trial_sections(rt, rt["configs"][0])
    assert job.params == {"samples": 256, "step_size": 4, "hidden": 8} and job.lr == 0.5
    assert (trainer.grad_clip_norm, data.samples) == (1.5, 99)
    assert rt["job"].params == {"samples": 256, "step_size": 4} and rt["trainer"].grad_clip_norm == 0.0


def test_a_searched_learning_rate_scales_every_param_group_keeping_their_ratios() -> None:
    a, b = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([{"params": [a], "lr": 0.1}, {"params": [b], "lr": 0.01}], lr=0.1)
    scale_lr(opt, 0.5)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.5, 0.05])


def test_the_metrics_are_the_workloads_numbers_and_the_searched_one_must_be_among_them() -> None:
    got = eval_metrics({"accuracy": 0.5, "n": 3, "t": torch.tensor(2.0), "bad name": 1.0, "nan": float("nan")}, "n")
    assert got == {"accuracy": 0.5, "n": 3.0, "t": 2.0}
    with pytest.raises(UserCodeError, match=r"^hpo.metric: the search optimises 'f1'.*accuracy, n, t"):
        eval_metrics({"accuracy": 0.5, "n": 3, "t": 2.0}, "f1")
    assert len(eval_metrics({f"m{i}": 1.0 for i in range(40)}, "m0")) == MAX_METRICS


def _run(loop: TrialLoop, start: int = 0, stop: int | None = None) -> dict[int, dict[str, bytes]]:
    """Iterations from ``start``; each one's checkpoint files (and, at ``stop``, no further)."""
    saved: dict[int, dict[str, bytes]] = {}

    class Stop(Exception):
        pass

    def report(it: int, metrics: dict[str, float], folder: str) -> None:
        assert set(metrics) == {"accuracy", "loss_calls"}
        saved[it] = read_trial_checkpoint(folder)
        if it == stop:
            raise Stop

    with contextlib.suppress(Stop):
        loop.run(start, report)
    return saved


def test_a_trial_resumed_from_its_checkpoint_ends_with_the_weights_of_one_never_stopped() -> None:
    values = {"job.params.hidden": 8, "lr": 0.3, "trainer.grad_clip_norm": 0.5, "trainer.grad_accum_steps": 2}
    whole = _run(TrialLoop(runtime(values), 0))
    stopped = _run(TrialLoop(runtime(values), 0), stop=2)
    again = TrialLoop(runtime(values), 0)
    assert again.restore(stopped[2]) == 2
    rest = _run(again, start=2)
    assert sorted(rest) == [3, 4]
    assert rest[4] == whole[4]  # model, optimizer, scheduler, the workload's own state, RNG: byte for byte
    # The values took effect: another clip norm trains other weights.
    other = _run(TrialLoop(runtime({**values, "trainer.grad_clip_norm": 0.0}), 0))
    assert other[4]["model.pt"] != whole[4]["model.pt"]
    assert load_tensors(whole[4]["state.pt"])["workload"] == {"calls": 4 * 3 * 2}


def test_a_trial_restored_at_its_last_iteration_reports_it_again_and_trains_nothing() -> None:
    """PBT may hand a trial a finished donor's checkpoint (at max_t): restored there, the
    trial reports that iteration once (the checkpoint evaluated, saved as it was), so its
    record stands at max_t in Tune's results and in the snapshot alike."""
    values = {"job.params.hidden": 8, "lr": 0.3}
    whole = _run(TrialLoop(runtime(values), 0))
    again = TrialLoop(runtime(values), 0)
    assert again.restore(whole[4]) == 4
    rest = _run(again, start=4)
    assert sorted(rest) == [4]
    assert rest[4]["model.pt"] == whole[4]["model.pt"] and rest[4]["optimizer.pt"] == whole[4]["optimizer.pt"]


def test_a_checkpoint_another_trial_wrote_gives_its_weights_and_step_and_this_trials_hyperparameters() -> None:
    """PBT's exploit: the donor's weights, optimizer state and step; the taker's rates."""
    donor_values, own = {"lr": 0.3, "job.params.hidden": 8}, {"lr": 0.05, "job.params.hidden": 8}
    donor = _run(TrialLoop(runtime(donor_values), 0), stop=2)[2]
    taker = TrialLoop(runtime(own), 1, own)
    assert taker.restore(donor) == 2
    assert [g["lr"] for g in taker.optimizer.param_groups] == [0.05]
    assert taker.scheduler.base_lrs == [0.05] and taker.scheduler.last_epoch == 2 * 3
    assert all(
        torch.equal(a, b)
        for a, b in zip(taker.model.state_dict().values(), load_tensors(donor["model.pt"]).values(), strict=True)
    )
    momentum = load_tensors(donor["optimizer.pt"])["state"]
    assert torch.equal(taker.optimizer.state_dict()["state"][0]["momentum_buffer"], momentum[0]["momentum_buffer"])
    # Its own checkpoint, restored again, keeps the rates it trained with (a scheduler's decay).
    again = TrialLoop(runtime(donor_values), 0)
    again.restore(donor)
    assert [g["lr"] for g in again.optimizer.param_groups] == [pytest.approx(0.3 * 0.5 ** (6 // 4))]
