"""A search's config: config paths, and every trial it can draw checked as a run's config is,
before anything launches (the workload's Params, bounds, the batch split)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.schema import Config
from orchestrator.config.usercode import check_user_code
from orchestrator.errors import ConfigError
from tests.support.paths import REPO

pytestmark = pytest.mark.unit


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A workload class outside the repository (its own folder, job.code_dir), searched."""
    folder = tmp_path / "proj"
    folder.mkdir()
    shutil.copy(REPO / "tests" / "fixtures" / "tinywork.py", folder / "tinywork.py")
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield ["job=digits_hpo", "job.workload=tinywork:Tiny", f"job.code_dir={folder}", "job.batch_size=32"]
    sys.modules.pop("tinywork", None)


def checked(overrides: list[str]) -> Config:
    cfg = compose(overrides)
    check_user_code(cfg)
    return cfg


def refused(overrides: list[str]) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        checked(overrides)
    assert "\n" not in str(err.value)
    return err.value


def test_a_nested_search_space_is_read_as_config_paths_and_saved_flat(tiny: list[str]) -> None:
    cfg = checked(
        [
            *tiny,
            "~hpo.search_space.lr",
            "~hpo.search_space.hidden_size",
            "hpo.search_space.job.params.hidden=choice 8 16 32",
            "hpo.search_space.job.lr=loguniform 0.01 0.3",
            "hpo.search_space.trainer.grad_clip_norm=uniform 0.5 2.0",
            "hpo.search_space.job.params.gamma=quniform 0.25 1.0 0.25",
            "hpo.metric=loss_calls",
            "hpo.mode=min",
        ]
    )
    assert cfg.hpo.search_space == {
        "job.params.hidden": "choice 8 16 32",
        "job.lr": "loguniform 0.01 0.3",
        "trainer.grad_clip_norm": "uniform 0.5 2.0",
        "job.params.gamma": "quniform 0.25 1.0 0.25",
    }
    assert cfg.hpo.metric == "loss_calls"


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        # A key that does not exist: in the workload's Params, or a trial's loop.
        ("hpo.search_space.job.params.depth=choice 1 2", "hpo.search_space.job.params.depth", "unknown key; Tiny"),
        ("hpo.search_space.trainer.workers=choice 1 2", "hpo.search_space.trainer.workers", "trainer.grad_clip_norm"),
        ("hpo.search_space.job.steps=choice 10 20", "hpo.search_space.job.steps", "hpo.max_t x"),
        ("hpo.search_space.cloud.provider=choice 1", "hpo.search_space.cloud.provider", "not a config path"),
        # A value the Params refuses (its type), or a bound a run's config has.
        ("hpo.search_space.job.params.hidden=choice 16 8.5", "hpo.search_space.job.params.hidden", "8.5"),
        (
            "hpo.search_space.job.params.hidden=uniform 8 16",
            "hpo.search_space.job.params.hidden",
            "expected an integer",
        ),
        ("hpo.search_space.trainer.grad_accum_steps=choice 1 0", "hpo.search_space.trainer.grad_accum_steps", ">= 1"),
        # A batch size the trial cannot split: named by the key that drew the split.
        ("hpo.search_space.trainer.grad_accum_steps=choice 1 3", "hpo.search_space.trainer.grad_accum_steps", "of 3"),
        (
            "hpo.search_space.job.batch_size=choice 32 33,trainer.grad_accum_steps=2",
            "hpo.search_space.job.batch_size",
            "can draw 33",
        ),
        # Keys only the built-ins read vary nothing for a class.
        ("hpo.search_space.job.hidden_size=choice 8 16", "hpo.search_space.job.hidden_size", "Tiny reads its own"),
        # Two keys for one path.
        ("hpo.search_space.job.lr=uniform 0.1 0.2", "hpo.search_space.job.lr", "as hpo.search_space.lr does"),
    ],
)
def test_a_search_that_can_draw_a_trial_a_run_would_refuse_is_one_line_naming_the_key(
    tiny: list[str], override: str, key: str, words: str
) -> None:
    base = [*tiny, "~hpo.search_space.hidden_size"]
    err = refused([*base, *override.split(",")])
    assert err.key == key, err
    assert words in str(err), err


def test_the_refusal_names_the_trial_and_what_refused_the_value(tiny: list[str]) -> None:
    err = refused([*tiny, "~hpo.search_space.hidden_size", "hpo.search_space.job.params.hidden=choice 16 8.5"])
    assert str(err).startswith("hpo.search_space.job.params.hidden: can draw 8.5 (trial_0000")
    assert "which job.params.hidden refuses: got 8.5; expected an integer" in str(err)


def test_a_built_in_takes_its_job_keys_and_trainer_keys_and_refuses_params(tiny: list[str]) -> None:
    ok = checked(["job=digits_hpo", "hpo.search_space.trainer.grad_accum_steps=grid 1 2"])
    assert ok.hpo.search_space["trainer.grad_accum_steps"] == "grid 1 2"
    err = refused(["job=digits_hpo", "hpo.search_space.job.params.hidden=choice 8 16"])
    assert err.key == "hpo.search_space.job.params.hidden" and "takes no params" in str(err)


@pytest.mark.parametrize(
    ("value", "words"),
    [("42", "expected a distribution"), ("uniform 1", "low < high"), ("quniform 0 1 2", "q must be")],
)
def test_a_malformed_distribution_names_its_path(value: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose(["job=digits_hpo", f"hpo.search_space.trainer.grad_clip_norm={value}"])
    assert err.value.key == "hpo.search_space.trainer.grad_clip_norm" and words in str(err.value)


def test_a_saved_search_reads_back_with_the_same_paths() -> None:
    import json

    from orchestrator.config.saved import config_from_plain, to_plain

    cfg = compose(["job=digits_hpo", "run_id=r1", "hpo.search_space.trainer.grad_clip_norm=uniform 0.5 2"])
    back = config_from_plain(json.loads(json.dumps(to_plain(cfg))))
    assert back.hpo.search_space == cfg.hpo.search_space
    assert back.hpo.search_space["trainer.grad_clip_norm"] == "uniform 0.5 2"


def test_optuna_takes_no_grid_and_its_edges_are_checked_as_trials(tiny: list[str]) -> None:
    base = [*tiny, "~hpo.search_space.hidden_size", "hpo.search_alg=optuna"]
    ok = checked([*base, "hpo.search_space.job.params.hidden=choice 8 16", "hpo.search_space.lr=uniform 0.01 0.5"])
    assert ok.hpo.search_alg == "optuna"
    err = refused([*base, "hpo.search_space.job.params.hidden=grid 8 16"])
    assert err.key == "hpo.search_space.job.params.hidden" and "with optuna use choice" in str(err)
    # Optuna proposes any value of a range: its ends are tried, as a trial, before launch.
    err = refused([*base, "hpo.search_space.trainer.grad_accum_steps=randint 0 3"])
    assert err.key == "hpo.search_space.trainer.grad_accum_steps" and "can draw 0 (a proposed trial)" in str(err)
    err = refused([*base, "hpo.search_space.trainer.grad_accum_steps=randint 1 4"])
    assert "can draw 3 (a proposed trial)" in str(err) and "use a multiple of 3" in str(err)


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["hpo.search_alg=optuna"], "hpo.scheduler", "use hpo.search_alg=random"),
        (["hpo.perturbation_interval=6"], "hpo.perturbation_interval", "1..5"),
        (["hpo.quantile_fraction=0.75"], "hpo.quantile_fraction", "0 < x <= 0.5"),
        (["hpo.num_samples=1"], "hpo.num_samples", "at least 2 trials"),
        (["hpo.mutate=[momentum]"], "hpo.mutate", "not a key of hpo.search_space"),
        (["~hpo.search_space.lr"], "hpo.mutate", "perturb nothing"),
    ],
)
def test_a_pbt_search_that_could_not_evolve_is_refused(overrides: list[str], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose(["job=digits_hpo", "hpo.scheduler=pbt", *overrides])
    assert err.value.key == key and words in str(err.value), err.value
    assert compose(["job=digits_hpo", "hpo.scheduler=pbt", "hpo.mutate=[lr,hidden_size]"]).hpo.mutate == [
        "lr",
        "hidden_size",
    ]


def test_multi_worker_trials_are_checked_in_their_own_world(tiny: list[str]) -> None:
    base = [*tiny, "~hpo.search_space.hidden_size"]
    cfg = checked([*base, "hpo.trial.workers=2"])
    assert (cfg.hpo.trial.workers, cfg.hpo.trial.cpus_per_worker) == (2, 1.0)
    err = refused([*base, "hpo.trial.workers=3"])
    assert err.key == "hpo.trial.workers" and "fits 2 worker(s) of 1 CPUs" in str(err), err
    err = refused([*base, "hpo.trial.workers=2", "hpo.trial.cpus_per_worker=1.5"])
    assert err.key == "hpo.trial.workers", err
    # The run's own batch, which two workers cannot split: no search key's doing.
    err = refused([*base, "hpo.trial.workers=2", "job.batch_size=33"])
    assert err.key == "job.batch_size" and "across hpo.trial.workers (2)" in str(err), err
    # A world of one splits it.
    checked([*base, "job.batch_size=33"])


def test_ray_data_trials_are_ray_train_runs_checked_in_their_own_world(tiny: list[str]) -> None:
    """data.loader=ray_data: each trial a Ray Train run (Ray Train splits the dataset), so
    its workers are hpo.trial.*'s at any world size; a workload without train_arrays()
    has no rows to give Ray Data."""
    cfg = checked(["job=digits_hpo", "data=ray_data"])
    assert cfg.data.loader == "ray_data" and cfg.hpo.trial.workers == 1
    err = refused(["job=digits_hpo", "data=ray_data", "hpo.trial.cpus_per_worker=3"])
    assert err.key == "hpo.trial.workers" and "fits 0 worker(s) of 3 CPUs" in str(err), err
    err = refused([*tiny, "data=ray_data"])
    assert err.key == "data.loader" and "train_arrays()" in str(err), err


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        # The issue's: quoted, the spec is a string to the command line's own number check.
        ("hidden_size=randint 0 99999999999999999999", "hidden_size", "an integer beyond int64"),
        ("job.params.width=randint 1 99999999999999999999", "job.params.width", "an integer beyond int64"),
        ("lr=uniform 0.1 0.1111111111111111111111111", "lr", "25 significant digits; at most 20"),
        ("lr=choice 0.1 1e99999", "lr", "an exponent beyond a double's range"),
        # Within int64, beyond what the key takes: at an edge a random search's list never drew.
        ("hidden_size=randint 0 64", "hidden_size", "can draw 0 (an edge of its range)"),
        ("hidden_size=randint 1 9223372036854775807", "hidden_size", "expected an integer in 1..1048576"),
        ("job.seed=randint 0 9223372036854775807", "job.seed", "which job.seed refuses"),
        ("batch_size=randint 1 99999999", "batch_size", "which job.batch_size refuses"),
        ("lr=uniform 0 1", "lr", "can draw 0.0 (an edge of its range)"),
    ],
)
def test_a_search_number_no_trial_could_use_is_refused_before_anything_launches(
    override: str, key: str, words: str
) -> None:
    err = refused(["job=digits_hpo", "~hpo.search_space.hidden_size", f"hpo.search_space.{override}"])
    assert err.key == f"hpo.search_space.{key}", err
    assert words in str(err), err


def test_a_random_search_is_checked_at_its_edges_too() -> None:
    from orchestrator.config.validate_search import trials

    cfg = compose(["job=digits_hpo", "~hpo.search_space.hidden_size", "hpo.search_space.job.seed=randint 0 4294967296"])
    drawn = list(trials(cfg))
    assert [label for label, _ in drawn[: cfg.hpo.num_samples]] == [
        f"trial_{i:05d}" for i in range(cfg.hpo.num_samples)
    ]
    assert {label for label, _ in drawn[cfg.hpo.num_samples :]} == {"an edge of its range"}
    assert {v["job.seed"] for _, v in drawn} >= {0, 4294967295}  # MAX_SEED: randint's high is excluded


def test_a_train_functions_free_form_params_take_any_int64_and_no_more() -> None:
    func = ["job.workload=", "job.train_func=mod:fn", "hpo.enabled=true"]
    top = 2**63 - 1
    cfg = compose([*func, f"hpo.search_space.job.params.w='randint {-top - 1} {top}'"])
    assert cfg.hpo.search_space == {"job.params.w": f"randint {-top - 1} {top}"}
    for spec in (f"randint 0 {top + 1}", f"choice 1 {-top - 2}", "randint 1 2**70"):
        err = refused([*func, f"hpo.search_space.job.params.w='{spec}'"])
        assert err.key == "hpo.search_space.job.params.w", err
