"""The search's config, search steps, best trial and experiment archive, without Ray."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.compose import compose
from orchestrator.config import ConfigError
from orchestrator.hpo import (
    TrialRecord,
    asha_rungs,
    best_of,
    max_search_steps,
    parse_distribution,
    progress_text,
    search_step,
)


def test_digits_hpo_composes_with_the_search_in_the_job_config() -> None:
    cfg = compose(["job=digits_hpo"])
    assert cfg.hpo.enabled and cfg.hpo.scheduler == "asha"
    assert cfg.hpo.search_space == {"lr": "loguniform 0.01 0.2", "hidden_size": "choice 32 64 128"}
    assert (cfg.recovery.resume_errored, cfg.recovery.restart_errored) == (True, False)
    assert not compose(["job=digits"]).hpo.enabled


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        ("hpo.search_space.lr=beta 1 2", "hpo.search_space.lr", "choice, grid, uniform"),
        ("hpo.search_space.lr=uniform 0.3 0.2", "hpo.search_space.lr", "low < high"),
        ("hpo.search_space.lr=loguniform 0 1", "hpo.search_space.lr", "low > 0"),
        ("hpo.search_space.hidden_size=choice 32 6.5", "hpo.search_space.hidden_size", "integers"),
        ("+hpo.search_space.momentum=choice 0.9", "hpo.search_space.momentum", "lr, hidden_size, batch_size"),
        ("hpo.mode=maximize", "hpo.mode", "max, min"),
        ("hpo.scheduler=pbt", "hpo.scheduler", "asha, fifo"),
        ("hpo.grace_period=9", "hpo.grace_period", "hpo.max_t"),
        ("hpo.reduction_factor=1", "hpo.reduction_factor", ">= 2"),
        ("hpo.cpus_per_trial=4", "hpo.cpus_per_trial", "no trial could start"),
        ("data.loader=ray_data", "data.loader", "sharded"),
        ("recovery.restart_errored=true", "recovery.restart_errored", "pick one"),
        ("chaos.faults=[{kind:kill_worker,at_step:3}]", "chaos.faults[0].kind", "kill_region"),
        ("chaos.faults=[{kind:kill_region,at_step:43}]", "chaos.faults[0].at_step", "1..42"),
    ],
)
def test_a_bad_search_config_names_its_key(override: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose(["job=digits_hpo", override])
    assert err.value.key == key
    assert words in str(err.value)


def test_distributions_parse_to_numbers() -> None:
    assert parse_distribution("lr", "loguniform 1e-3 0.2") == ("loguniform", [0.001, 0.2])
    assert parse_distribution("hidden_size", "grid 32 64") == ("grid", [32, 64])
    assert parse_distribution("batch_size", "randint 16 128") == ("randint", [16, 128])


def test_search_steps_count_iterations_and_finished_trials() -> None:
    trials = [
        TrialRecord("a", "TERMINATED", iteration=6),
        TrialRecord("b", "TERMINATED", iteration=2),
        TrialRecord("c", "RUNNING", iteration=3),
        TrialRecord("d", "ERROR", iteration=1),
        TrialRecord("e", "PENDING"),
    ]
    assert search_step(trials) == 6 + 2 + 3 + 1 + 3
    assert max_search_steps(6, 6) == 42
    assert asha_rungs(6, 2, 2) == [2, 4]
    assert asha_rungs(9, 1, 3) == [1, 3]


def test_best_trial_follows_metric_and_mode_and_never_an_errored_one() -> None:
    trials = [
        TrialRecord("a", "TERMINATED", metrics={"accuracy": 0.90, "eval_loss": 0.30}),
        TrialRecord("b", "TERMINATED", metrics={"accuracy": 0.95, "eval_loss": 0.40}),
        TrialRecord("c", "ERROR", metrics={"accuracy": 0.99, "eval_loss": 0.01}),
    ]
    best_acc, best_loss = best_of(trials, "accuracy", "max"), best_of(trials, "eval_loss", "min")
    assert best_acc is not None and best_acc.trial_id == "b"
    assert best_loss is not None and best_loss.trial_id == "a"
    assert best_of([TrialRecord("x", "ERROR", metrics={"accuracy": 1.0})], "accuracy", "max") is None


def test_progress_text_shows_trials_and_the_best_so_far() -> None:
    text = progress_text(
        {"trials": {"running": 2, "terminated": 3}, "best": {"metric": "accuracy", "value": 0.9688, "trial_id": "t3"}}
    )
    assert text == "  trials 2 running 3 terminated  best accuracy 0.9688 (t3)"
    assert progress_text({"step": 3}) == ""


# --- the experiment archive ---------------------------------------------------------------------


def _trial(kept: list[str] | None) -> SimpleNamespace:
    results = None if kept is None else [SimpleNamespace(checkpoint=SimpleNamespace(path=p)) for p in kept]
    return SimpleNamespace(
        run_metadata=SimpleNamespace(checkpoint_manager=SimpleNamespace(best_checkpoint_results=results))
    )


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_archive_keeps_named_checkpoints_and_the_staged_state_only(tmp_path: Path) -> None:
    from orchestrator.runtime.tune_loop import pack_experiment, unpack_experiment

    exp, staging = tmp_path / "search", tmp_path / "staging"
    _write(exp / "tuner.pkl", "tuner")
    _write(exp / "experiment_state-old.json", "stale state")
    trial = exp / "trial_a"
    _write(trial / "checkpoint_000001" / "state.pt", "it 1")
    _write(trial / "checkpoint_000002" / "state.pt", "it 2")
    _write(trial / "checkpoint_000003" / "state.pt", "persisted, not yet registered by Tune")
    _write(staging / "experiment_state-now.json", "current state")
    kept = [str(trial / "checkpoint_000001"), str(trial / "checkpoint_000002")]

    data = pack_experiment(str(exp), str(staging), [_trial(kept)])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = sorted(tar.getnames())
    assert names == [
        "experiment_state-now.json",
        "trial_a/checkpoint_000001/state.pt",
        "trial_a/checkpoint_000002/state.pt",
        "tuner.pkl",
    ]
    # Unknown kept set (an older Tune): every checkpoint goes in.
    with tarfile.open(fileobj=io.BytesIO(pack_experiment(str(exp), str(staging), [_trial(None)]))) as tar:
        assert "trial_a/checkpoint_000003/state.pt" in tar.getnames()

    out = tmp_path / "restored" / "search"
    _write(out / "leftover.txt", "from an earlier attempt")
    unpack_experiment(data, str(out))
    assert sorted(os.listdir(out)) == ["experiment_state-now.json", "trial_a", "tuner.pkl"]
    assert (out / "trial_a" / "checkpoint_000002" / "state.pt").read_text() == "it 2"


def test_unpacking_refuses_a_member_outside_the_folder(tmp_path: Path) -> None:
    from orchestrator.runtime.tune_loop import unpack_experiment

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    with pytest.raises(tarfile.OutsideDestinationError):
        unpack_experiment(buf.getvalue(), str(tmp_path / "search"))
    assert not (tmp_path / "escaped.txt").exists()
