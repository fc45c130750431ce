"""The search space: config paths, distributions, the trials drawn from it."""

from __future__ import annotations

import math
import re

import pytest

from orchestrator.config.compose import compose
from orchestrator.errors import ConfigError
from orchestrator.hpo.space import (
    apply_values,
    config_path,
    flatten_space,
    parse_distribution,
    quantize,
    sample_configs,
    trial_count,
)
from orchestrator.hpo.trials import trial_key


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
        ("hpo.search_space.hidden_size=choice 32 6.5", "hpo.search_space.hidden_size", "expected an integer"),
        ("+hpo.search_space.momentum=choice 0.9", "hpo.search_space.momentum", "not a config path"),
        ("hpo.mode=maximize", "hpo.mode", "max, min"),
        ("hpo.scheduler=hyperband", "hpo.scheduler", "asha, fifo, pbt"),
        ("hpo.grace_period=9", "hpo.grace_period", "hpo.max_t"),
        ("hpo.reduction_factor=1", "hpo.reduction_factor", ">= 2"),
        ("hpo.cpus_per_trial=4", "hpo.cpus_per_trial", "no trial could start"),
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


def test_trials_are_drawn_once_from_the_seed_within_their_distributions() -> None:
    space = {"lr": "loguniform 0.01 0.2", "hidden_size": "choice 32 64 128", "batch_size": "randint 16 20"}
    configs = sample_configs(space, 50, seed=0)
    assert configs == sample_configs(space, 50, seed=0) != sample_configs(space, 50, seed=1)
    assert len(configs) == trial_count(space, 50) == 50
    assert all(0.01 <= c["lr"] <= 0.2 and c["hidden_size"] in (32, 64, 128) for c in configs)
    assert {c["batch_size"] for c in configs} == {16, 17, 18, 19}  # high excluded, as Tune's
    assert all(isinstance(c["hidden_size"], int) and isinstance(c["lr"], float) for c in configs)
    # Log-uniform: as many draws below the geometric mean as above it, roughly.
    below = sum(c["lr"] < math.sqrt(0.01 * 0.2) for c in sample_configs(space, 2000, seed=3))
    assert 900 < below < 1100


def test_every_round_takes_every_grid_combination() -> None:
    space = {"hidden_size": "grid 32 64", "batch_size": "grid 8 16 32", "lr": "uniform 0.1 0.2"}
    configs = sample_configs(space, 2, seed=0)
    assert trial_count(space, 2) == len(configs) == 12
    grid = [(c["hidden_size"], c["batch_size"]) for c in configs]
    assert grid[:6] == grid[6:] == [(32, 8), (32, 16), (32, 32), (64, 8), (64, 16), (64, 32)]
    assert len({c["lr"] for c in configs}) == 12
    assert trial_key(3) == "trial_00003"


# --- config paths and the quantized distributions ----------------------------------------------------


def test_a_nested_space_flattens_to_paths_and_a_flat_one_stays_as_it_is() -> None:
    nested = {"job": {"params": {"hidden": "choice 8 16"}, "lr": "uniform 0.1 0.2"}, "lr": "choice 0.1"}
    flat = flatten_space(nested)
    assert flat == {"job.params.hidden": "choice 8 16", "job.lr": "uniform 0.1 0.2", "lr": "choice 0.1"}
    assert flatten_space(flat) == flat
    with pytest.raises(ConfigError, match=r"^hpo.search_space.job.params.hidden: got '3'; expected a distribution"):
        flatten_space({"job": {"params": {"hidden": 3}}})
    deep: dict = {"job": {}}
    node = deep["job"]
    for _ in range(10):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(ConfigError, match="nests deeper"):
        flatten_space(deep)


def test_a_key_is_a_config_path_or_one_of_the_short_keys() -> None:
    assert config_path("lr") == "job.lr" and config_path("batch_size") == "job.batch_size"
    assert config_path("trainer.grad_clip_norm") == "trainer.grad_clip_norm"
    for bad in ("momentum", "job", "cloud.provider", "job..lr", "trainer."):
        with pytest.raises(ConfigError, match=f"^hpo.search_space.{re.escape(bad)}: not a config path"):
            config_path(bad)


def test_quantized_draws_are_multiples_of_q_within_the_bounds() -> None:
    space = {"a": "quniform 8 64 8", "b": "qloguniform 0.001 1.0 0.005", "c": "quniform 0 10 6"}
    configs = sample_configs(space, 300, seed=0)
    assert {c["a"] for c in configs} <= set(range(8, 65, 8)) and all(isinstance(c["a"], int) for c in configs)
    assert all(isinstance(c["b"], float) and 0.005 <= c["b"] <= 1.0 for c in configs)
    assert all(abs(c["b"] / 0.005 - round(c["b"] / 0.005)) < 1e-9 for c in configs)
    assert {c["c"] for c in configs} <= {0, 6}  # 12 rounds past high: back to the last multiple inside
    assert quantize(9.4, 0, 10, 6) == 6 and quantize(0.2, 0.5, 1.0, 0.25) == 0.5


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("quniform 1 2", "low, high and q"),
        ("quniform 0 1 2", "q must be > 0 and at most high - low"),
        ("qloguniform 0 1 0.1", "low > 0"),
        ("randint 1 2.5", "randint takes integers"),
        ("choice 1 inf", "finite"),
    ],
)
def test_a_malformed_distribution_says_what_it_needs(text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        parse_distribution("job.params.x", text)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        # The issue's: an integer no trial's value (a JSON int, an int64) can hold.
        (
            "randint 0 99999999999999999999",
            "'99999999999999999999' in 'randint 0 99999999999999999999'; an integer beyond int64",
        ),
        ("randint 1 9223372036854775808", "beyond int64"),
        ("choice -9223372036854775809 1", "beyond int64"),
        ("grid 1 " + "9" * 5000, "beyond int64"),  # counted, never handed to int()
        ("quniform 1 99999999999999999999 1", "beyond int64"),
        # Floats beyond a double, or that a double rounds to 0.
        ("uniform 1 1e400", "'1e400' in 'uniform 1 1e400'; expected finite numbers"),
        ("choice 0.1 1e-400", "too small for a double"),
        # Words that are no number as the command line writes one.
        ("choice 1 nan", "expected finite numbers, e.g. 32"),
        ("choice 1 -inf", "expected finite numbers"),
        ("randint 1 0x10", "'0x10'"),
        ("choice 1 \u0661\u0662", "expected finite numbers"),  # digits, but not ASCII ones
        ("choice 1 1e", "expected finite numbers"),
        # Ranges whose draws overflow, log ranges through 0, q too fine for its range.
        ("uniform -1e308 1e308", "high - low must be a finite number"),
        ("quniform -1e308 1e308 1e300", "high - low must be a finite number"),
        ("loguniform -1 1", "low > 0"),
        ("quniform 0 1e300 1e-300", "q is too small for the range"),
        ("quniform 0 1 1e-17", "q is too small for the range"),
        ("choice " + " ".join(["1"] * 1001), "lists more than 1000 values"),
    ],
)
def test_a_number_no_trial_could_use_is_refused_naming_the_key(text: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_distribution("job.params.x", text)
    assert err.value.key == "hpo.search_space.job.params.x" and words in str(err.value), err.value
    assert len(str(err.value)) < 400  # a 5000-digit number is shown cut


def test_numbers_within_bounds_still_parse() -> None:
    top, bottom = 2**63 - 1, -(2**63)
    assert parse_distribution("x", f"randint {bottom} {top}") == ("randint", [bottom, top])
    assert parse_distribution("x", "choice +5 1_000 .5 1. 1e3 -2E-3") == ("choice", [5, 1000, 0.5, 1.0, 1000.0, -0.002])
    assert parse_distribution("x", "loguniform 5e-324 1e308")[1] == [5e-324, 1e308]
    assert parse_distribution("x", "quniform 0 9007199254740992 1")[1] == [0, 2**53, 1]


def test_values_land_at_their_paths_in_a_copy() -> None:
    plain = {"job": {"lr": 0.1, "params": {"a": 1}}, "trainer": {"grad_clip_norm": 0.0}, "data": {}}
    out = apply_values(plain, {"lr": 0.5, "job.params.b.c": 2, "trainer.grad_clip_norm": 1.0})
    assert out["job"] == {"lr": 0.5, "params": {"a": 1, "b": {"c": 2}}} and out["trainer"]["grad_clip_norm"] == 1.0
    assert plain["job"] == {"lr": 0.1, "params": {"a": 1}} and plain["trainer"]["grad_clip_norm"] == 0.0
    assert out["data"] is plain["data"]
