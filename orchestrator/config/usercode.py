"""The user's code, imported in the controller before anything launches.

A module that does not import, a class without a required method, params its
``Params`` dataclass refuses, or a batch size the workers cannot split: each is
one ``ConfigError`` naming the key, caught before a cluster starts. The same
imports happen again on every worker; this check makes the first failure cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.config.schema import Config
from orchestrator.config.validate_search import BUILTIN_ONLY, each_trial
from orchestrator.errors import ConfigError

# Where the code's own usage goes wrong (beyond importing): the method that decides the data path.
DATASET_MODE = "dataset"
BATCH_MODE = "batch"


def data_mode(cls: type) -> str:
    """``dataset`` or ``batch``: which of the two the class defines (never both)."""
    has_batch = callable(getattr(cls, "batch", None))
    has_dataset = callable(getattr(cls, "dataset", None))
    if has_batch and has_dataset:
        raise ConfigError(
            "job.workload",
            f"{cls.__module__}:{cls.__qualname__} defines both batch() and dataset(); define one of them "
            "(dataset(): the orchestrator samples and collates; batch(): your function does)",
        )
    return DATASET_MODE if has_dataset else BATCH_MODE


def check_user_code(cfg: Config) -> None:
    """Import what ``job.workload`` or ``job.train_func`` names and check it against the config.

    ``job.code_dir`` must be a folder; it is made absolute (a resumed run finds it from any
    working directory) and put first on this process's ``sys.path``, so the code is checked
    as the clusters will import it. The clusters get it from their provider: local ones on
    the PYTHONPATH they start with, SkyPilot ones as a file mount.
    """
    import os
    import sys

    from orchestrator.workloads import JOB_KEY_WORKLOADS, WorkloadError, train_function, workload_class

    job = cfg.job
    if job.code_dir:
        path = os.path.abspath(os.path.expanduser(job.code_dir))
        if not os.path.isdir(path):
            raise ConfigError(
                "job.code_dir",
                f"{job.code_dir!r} is not a folder; give the folder that holds your package "
                "(the one you would put on PYTHONPATH)",
            )
        job.code_dir = path
        sys.path[:] = [path, *(p for p in sys.path if p != path)]
    if job.workload in JOB_KEY_WORKLOADS:
        # digits and synthetic: batch() workloads that read job.* and have train_arrays();
        # nothing to import (torch would cost every run's start seconds).
        _check_builtin(cfg)
        if cfg.hpo.enabled:
            each_trial(cfg, _check_builtin)
        return
    try:
        if job.train_func:
            train_function(job.train_func)
            return
        cls = workload_class(job.workload)
    except WorkloadError as exc:
        raise ConfigError(exc.key, str(exc).split(": ", 1)[1]) from None
    _check_class(cfg, cls)
    if cfg.hpo.enabled:
        _check_search_keys(cfg, cls)
        each_trial(cfg, lambda trial: _check_class(trial, cls))


def listener_factory(spec: str, key: str) -> Callable[..., Any]:
    """What a ``metrics.listeners`` entry names (module:Name), imported: a class or function
    that makes a listener. ConfigError naming ``key`` when it does not import or cannot be called."""
    from orchestrator.workloads import WorkloadError, import_object

    try:
        made = import_object(spec, key)
    except WorkloadError as exc:
        raise ConfigError(exc.key, str(exc).split(": ", 1)[1]) from None
    if not callable(made):
        raise ConfigError(key, f"{spec!r} is a {type(made).__name__}; name a class or function that makes a listener")
    return made  # type: ignore[no-any-return]


def check_listeners(cfg: Config) -> None:
    """Each ``metrics.listeners`` entry imports (a new run's, before anything is written):
    one that does not is one line naming it."""
    for i, spec in enumerate(cfg.metrics.listeners):
        listener_factory(spec, f"metrics.listeners[{i}]")


def _check_builtin(cfg: Config) -> None:
    job = cfg.job
    if job.params:
        raise ConfigError(
            f"job.params.{next(iter(job.params))}",
            f"the built-in {job.workload} takes no params; it reads job.lr, job.hidden_size, "
            "job.batch_size and job.eval_fraction",
        )


def _check_class(cfg: Config, cls: type) -> None:
    """job.params against the class's Params, its data path against data.loader and the batch split."""
    from orchestrator.workloads import WorkloadError, validate_params

    job = cfg.job
    try:
        validate_params(cls, dict(job.params))
    except WorkloadError as exc:
        raise ConfigError(exc.key, str(exc).split(": ", 1)[1]) from None
    mode = data_mode(cls)
    if cfg.data.loader == "ray_data" and not callable(getattr(cls, "train_arrays", None)):
        raise ConfigError(
            "data.loader",
            f"ray_data needs the workload's train_arrays() (features, labels); {job.workload} has none: "
            "use data.loader=sharded",
        )
    # A search's trial trains in a world of its own (hpo.trial.workers; one process by default).
    workers, named = (
        (cfg.hpo.trial.workers, "hpo.trial.workers") if cfg.hpo.enabled else (cfg.trainer.workers, "trainer.workers")
    )
    split = workers * cfg.trainer.grad_accum_steps
    if mode == DATASET_MODE and job.batch_size % split:
        raise ConfigError(
            "job.batch_size",
            f"got {job.batch_size}; a dataset() workload splits the global batch across {named} "
            f"({workers}) x trainer.grad_accum_steps ({cfg.trainer.grad_accum_steps}): use a multiple of {split}",
        )
    if cfg.trainer.strategy == "fsdp" and callable(getattr(cls, "shard_units", None)):
        _check_shard_units(cls, dict(job.params))


def _check_search_keys(cfg: Config, cls: type) -> None:
    """A workload class reads job.params (and, in a search, job.lr scales its optimizer):
    the built-ins' own keys would vary nothing."""
    from orchestrator.hpo.space import config_path, where

    name = f"{cls.__module__}:{cls.__qualname__}"
    for key in cfg.hpo.search_space:
        path = config_path(key)
        if path in BUILTIN_ONLY:
            raise ConfigError(
                where(key), f"{name} reads its own job.params; {path} applies to the built-ins digits and synthetic"
            )
        if path == "job.batch_size" and data_mode(cls) != DATASET_MODE:
            raise ConfigError(
                where(key), f"{name} makes its own batches (batch()); job.batch_size applies to dataset() workloads"
            )


def _check_shard_units(cls: type, params: dict[str, object]) -> None:
    """trainer.strategy=fsdp: the workload's own shard_units(model) names modules of its model
    (built on the meta device: no weights allocated)."""
    from orchestrator.workloads import validate_params
    from orchestrator.workloads.units import ShardUnitError, check_units_before_launch

    try:
        workload = cls(validate_params(cls, params))
    except Exception:  # the constructor's own failure is construct_problem's to report, by line
        return
    try:
        check_units_before_launch(workload)
    except ShardUnitError as exc:
        raise ConfigError("job.workload", f"{cls.__module__}:{cls.__qualname__}: {exc}") from None
