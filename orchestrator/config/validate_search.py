"""A search's config: hpo.*, its search space, and every trial it can run checked as a run is.

A search space that can draw a value a run's config would refuse (a ``Params`` field's
type, a bound, the batch-size split) is refused before anything launches, naming the
search key, the value and what refused it: each trial's values are set in a copy of the
config (``with_values``) and that copy meets the run's checks (``each_trial``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import fields, is_dataclass
from typing import Any

from orchestrator.config.bounds import number_problem
from orchestrator.config.checks import MIN_CPUS, at_least, positive_int, seconds
from orchestrator.config.derived import region_workers
from orchestrator.config.schema import Config
from orchestrator.errors import ConfigError
from orchestrator.hpo.pbt import mutable_keys
from orchestrator.hpo.space import (
    MAX_TRIALS,
    MAX_VALUES,
    Distribution,
    apply_values,
    config_path,
    edge_values,
    flatten_space,
    parse_distribution,
    sample_configs,
    shown,
    trial_count,
    validate_search_space,
    where,
)
from orchestrator.hpo.trials import ray_train_trial, trial_key
from orchestrator.wire.codec import show
from orchestrator.wire.sections import METRIC_NAME

# What a trial honours besides job.params.*: the keys of each section its loop reads.
TRIAL_KEYS = {
    "job": ("lr", "hidden_size", "batch_size", "seed", "eval_fraction"),
    "trainer": ("grad_clip_norm", "grad_accum_steps", "torch_threads"),
    "data": ("samples", "features"),
}
# Keys only the built-in workloads (digits, synthetic) read.
BUILTIN_ONLY = ("job.hidden_size", "job.eval_fraction", "data.samples", "data.features")


def validate_search(cfg: Config, check_training: Callable[[Config], None]) -> None:
    """hpo.* (the search space made flat: config paths), then every trial it can run
    through ``check_training`` (the run's checks of job.*, trainer.* and data.*)."""
    hpo = cfg.hpo
    if not hpo.enabled:
        return
    for key in ("num_samples", "max_concurrent", "max_t", "grace_period", "steps_per_iteration"):
        positive_int(f"hpo.{key}", getattr(hpo, key))
    if hpo.reduction_factor < 2:
        raise ConfigError("hpo.reduction_factor", f"got {hpo.reduction_factor}; expected an integer >= 2")
    if hpo.grace_period > hpo.max_t:
        raise ConfigError("hpo.grace_period", f"got {hpo.grace_period}; expected <= hpo.max_t ({hpo.max_t})")
    if not (isinstance(hpo.metric, str) and METRIC_NAME.fullmatch(hpo.metric)):
        raise ConfigError(
            "hpo.metric",
            f"got {show(hpo.metric)}; expected the name of a metric the workload's evaluate() returns "
            "(e.g. accuracy, eval_loss)",
        )
    at_least("hpo.cpus_per_trial", hpo.cpus_per_trial, MIN_CPUS, "CPUs")
    seconds("hpo.snapshot_interval_s", hpo.snapshot_interval_s, off=True)
    if ray_train_trials(cfg):
        _check_trial_workers(cfg)
    else:
        for name in cfg.candidate_regions():
            have = cfg.cloud.regions[name].num_cpus
            if hpo.cpus_per_trial > have:
                raise ConfigError(
                    "hpo.cpus_per_trial",
                    f"got {hpo.cpus_per_trial:g}; region {name!r} has {have} CPUs, so no trial could start",
                )
    # Paths from here on: the saved config, the runtime and the records see them flat.
    hpo.search_space = flatten_space(hpo.search_space)
    check_numbers(hpo.search_space)
    validate_search_space(hpo.search_space)
    for key in hpo.search_space:
        if cfg.job.train_func:
            check_function_key(key)
        else:
            check_trial_key(key)
    if hpo.scheduler == "pbt" and cfg.job.train_func:
        raise ConfigError(
            "hpo.scheduler",
            "pbt moves a trial's checkpoint to another trial with other values, which the built-in loop "
            "(job.workload) knows how to take; with job.train_func use asha or fifo",
        )
    if hpo.search_alg == "optuna":
        check_optuna(hpo.search_space)
    if hpo.scheduler == "pbt":
        check_pbt(cfg)
    if (n := trial_count(hpo.search_space, hpo.num_samples)) > MAX_TRIALS:
        raise ConfigError(
            "hpo.num_samples",
            f"the search would run {n} trials (num_samples times every grid combination); at most {MAX_TRIALS}",
        )
    each_trial(cfg, check_training)


def _check_trial_workers(cfg: Config) -> None:
    """hpo.trial.*: a trial's Ray Train workers, which every candidate region must fit."""
    trial = cfg.hpo.trial
    positive_int("hpo.trial.workers", trial.workers)
    at_least("hpo.trial.cpus_per_worker", trial.cpus_per_worker, MIN_CPUS, "CPUs")
    if not trial.gpus_per_worker >= 0:
        raise ConfigError("hpo.trial.gpus_per_worker", f"got {show(trial.gpus_per_worker)}; expected a number >= 0")
    world = trial_trainer(cfg)
    for name in cfg.candidate_regions():
        fits = region_workers(cfg.cloud.regions[name], world)
        if fits < trial.workers:
            raise ConfigError(
                "hpo.trial.workers",
                f"got {trial.workers}; region {name!r} fits {fits} worker(s) of {trial.cpus_per_worker:g} CPUs "
                f"and {trial.gpus_per_worker:g} GPUs, so no trial could start; lower hpo.trial.workers or "
                "hpo.trial.cpus_per_worker",
            )


def ray_train_trials(cfg: Config) -> bool:
    return ray_train_trial(cfg.hpo.trial.workers, cfg.job.train_func, cfg.data.loader)


def trial_trainer(cfg: Config) -> Any:
    """The run's trainer.* as a trial's world has it: hpo.trial's workers, fixed (a world
    of one unless hpo.trial.workers says more), with their CPUs and GPUs."""
    trainer = copy.copy(cfg.trainer)
    trial = cfg.hpo.trial
    trainer.workers, trainer.min_workers = trial.workers, 0
    if ray_train_trials(cfg):
        trainer.cpus_per_worker, trainer.gpus_per_worker = trial.cpus_per_worker, trial.gpus_per_worker
    return trainer


def check_numbers(space: dict[str, str]) -> None:
    """A spec's numbers bounded as the command line's are (orchestrator.config.bounds): a
    quoted spec is a string to the command line's own check, so it never saw them."""
    for key, text in space.items():
        for word in str(text).split()[1 : MAX_VALUES + 2]:
            why = number_problem(word)
            if why is not None:
                raise ConfigError(
                    where(key), f"got {shown(word)} in {shown(text)}: {why}; give numbers a trial can take"
                )


def check_trial_key(key: str) -> None:
    """A path the trial loop honours: job.params.*, or one of TRIAL_KEYS."""
    path = config_path(key)
    section, _, rest = path.partition(".")
    if section == "job" and rest.startswith("params."):
        return
    if rest not in TRIAL_KEYS[section]:
        if rest == "steps":
            raise ConfigError(where(key), "a trial trains hpo.max_t x hpo.steps_per_iteration steps: vary those")
        allowed = ", ".join(f"{section}.{k}" for k in TRIAL_KEYS[section])
        raise ConfigError(
            where(key),
            f"{path} is not a key a trial can vary; of {section}.* a trial honours {allowed}"
            + (", and any job.params.<key> of the workload" if section == "job" else ""),
        )


def check_function_key(key: str) -> None:
    """A train function's config is job.params: a key a search of one varies."""
    path = config_path(key)
    if not path.startswith("job.params."):
        raise ConfigError(
            where(key),
            f"{path} is not a key a train function reads: its config is job.params; search "
            "hpo.search_space.job.params.<key> (the trial's workers are hpo.trial.*)",
        )


def check_pbt(cfg: Config) -> None:
    """Population-based training perturbs the population it started with (drawn up front)."""
    hpo = cfg.hpo
    if hpo.search_alg != "random":
        raise ConfigError("hpo.scheduler", "pbt evolves a population drawn up front: use hpo.search_alg=random with it")
    if not 1 <= hpo.perturbation_interval < hpo.max_t:
        raise ConfigError(
            "hpo.perturbation_interval",
            f"got {show(hpo.perturbation_interval)}; expected an integer in 1..{hpo.max_t - 1} (below hpo.max_t)",
        )
    if not 0 < hpo.quantile_fraction <= 0.5:
        raise ConfigError("hpo.quantile_fraction", f"got {show(hpo.quantile_fraction)}; expected 0 < x <= 0.5")
    if trial_count(hpo.search_space, hpo.num_samples) < 2:
        raise ConfigError("hpo.num_samples", "pbt needs a population: at least 2 trials")
    for key in hpo.mutate:
        if key not in hpo.search_space:
            raise ConfigError("hpo.mutate", f"names {key!r}, which is not a key of hpo.search_space")
    if not mutable_keys(hpo.search_space, list(hpo.mutate)):
        raise ConfigError(
            "hpo.mutate",
            "pbt would perturb nothing: the search space has only integer keys (kept from a trial's donor); "
            "name the keys to perturb, e.g. hpo.mutate=[lr]",
        )


def check_optuna(space: dict[str, str]) -> None:
    """Optuna proposes every value itself: no grid keys; and it must be installed here
    (the controller's check before launch; the clusters get it as the controller's
    environment does)."""
    import importlib.util

    for key, text in space.items():
        if parse_distribution(key, text)[0] == Distribution.grid:
            raise ConfigError(
                where(key), "a grid is search_alg=random's (every combination, in order); with optuna use choice"
            )
    if importlib.util.find_spec("optuna") is None:
        raise ConfigError(
            "hpo.search_alg",
            "optuna is not installed in this Python: pip install -c constraints.txt -e '.[search]', "
            "or use hpo.search_alg=random",
        )


def trials(cfg: Config) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each trial the search can run, by id, with its values: a random search's list, then a
    trial at each edge of each key (every choice, both ends of a range), the other keys at
    their first edge, which is what a searcher that proposes its own trials gets. A random
    search's edges too: the values its list happened to draw are not all the space can
    (``randint 0 64`` for a key of >= 1 draws 0 once in 64), and a bound is the space's."""
    hpo = cfg.hpo
    random_search = hpo.search_alg == "random"
    if random_search:
        for i, values in enumerate(sample_configs(hpo.search_space, hpo.num_samples, cfg.job.seed)):
            yield trial_key(i), values
    label = "an edge of its range" if random_search else "a proposed trial"
    edges = edge_values(hpo.search_space)
    base = {key: values[0] for key, values in edges.items()}
    yield label, base
    for key, values in edges.items():
        for value in values[1:]:
            yield label, {**base, key: value}


def each_trial(cfg: Config, check: Callable[[Config], None]) -> None:
    """``check`` on a copy of ``cfg`` with each distinct trial's values set; the first
    ConfigError comes back naming the search key that drew the value, the value, the
    trial and what refused it."""
    seen: set[tuple[tuple[str, Any], ...]] = set()
    for label, values in trials(cfg):
        signature = tuple(sorted(values.items()))
        if signature in seen:
            continue
        seen.add(signature)
        try:
            check(with_values(cfg, values))
        except ConfigError as exc:
            key = blamed(exc.key, values, lambda without: _passes(check, with_values(cfg, without)))
            if key is None:
                # No search key's doing: the run's own values refused in a trial's world.
                world = f" (a trial's world: hpo.trial.workers={cfg.hpo.trial.workers})"
                raise ConfigError(exc.key, f"{str(exc).split(': ', 1)[1]}{world}") from None
            raise ConfigError(
                where(key),
                f"can draw {show(values[key])} ({label}), which {exc.key} refuses: {str(exc).split(': ', 1)[1]}",
            ) from None


def blamed(refused: str, values: dict[str, Any], passes: Callable[[dict[str, Any]], bool]) -> str | None:
    """The search key to name for a refusal of ``refused`` (a config path): the key at that
    path; else the first whose value, left at the run's, lets the trial pass (a batch size
    that a searched grad_accum_steps cannot split names grad_accum_steps); None when the
    trial with none of its values fails too (the run's own values are refused)."""
    paths = {config_path(k): k for k in values}
    for path, key in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        if refused == path or refused.startswith(f"{path}.") or path.startswith(f"{refused}."):
            return key
    for key in values:
        if passes({k: v for k, v in values.items() if k != key}):
            return key
    return None if not passes({}) else next(iter(values))


def _passes(check: Callable[[Config], None], trial: Config) -> bool:
    try:
        check(trial)
    except ConfigError:
        return False
    return True


def with_values(cfg: Config, values: dict[str, Any]) -> Config:
    """A copy of ``cfg`` (job, trainer and data copied; the rest shared) with each search
    key's value at its path; a value of the wrong type for its field is a ConfigError."""
    trial = copy.copy(cfg)
    trial.job, trial.trainer, trial.data = copy.copy(cfg.job), trial_trainer(cfg), copy.copy(cfg.data)
    params = {k: v for k, v in values.items() if config_path(k).startswith("job.params.")}
    if params:
        # As the trial's loop sets them (apply_values copies what it changes).
        trial.job.params = apply_values({"job": {"params": cfg.job.params}}, params)["job"]["params"]
    for key, value in values.items():
        if key in params:
            continue
        section_name, name = config_path(key).split(".")
        section = getattr(trial, section_name)
        setattr(section, name, typed(config_path(key), section, name, value))
    return trial


def typed(path: str, section: Any, name: str, value: Any) -> Any:
    """``value`` as the field's type: an int field takes integers only, a float field any number."""
    assert is_dataclass(section)
    kind = type(next(f for f in fields(section) if f.name == name).default)
    if kind is int:
        if not isinstance(value, int):
            raise ConfigError(
                path, f"got {show(value)}; expected an integer (draw it with choice, grid, randint or quniform)"
            )
    if kind is float:
        return float(value)
    return value
