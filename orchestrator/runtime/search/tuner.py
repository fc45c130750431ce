"""The Tune experiment of an attempt: its trials, scheduler and run config, on scratch."""

from __future__ import annotations

from typing import Any

from ray import tune

from orchestrator.runtime.search.driver import SearchCallback, SearchDriver
from orchestrator.runtime.search.scheduler import make_scheduler
from orchestrator.runtime.search.trial import INDEX, trial_func, trial_inputs
from orchestrator.wire.spec import RuntimeSpec

EXPERIMENT = "search"
# Trial checkpoints Tune keeps (the newest is the one a trial resumes from).
KEEP_TRIAL_CHECKPOINTS = 2


def build_tuner(spec: RuntimeSpec, driver: SearchDriver, scratch: str) -> Any:
    """A Tuner over the trials ``driver``'s plan runs (a grid of their indexes), its
    experiment folder under ``scratch``, Tune's events to ``driver``."""
    hpo = driver.hpo
    trainable = tune.with_resources(
        tune.with_parameters(
            trial_func, runtime=trial_inputs(spec, hpo, driver.configs), resume=driver.plan.checkpoints
        ),
        {"cpu": hpo.cpus_per_trial},
    )
    return tune.Tuner(
        trainable,
        param_space={INDEX: tune.grid_search(driver.plan.run)},
        tune_config=tune.TuneConfig(
            metric=hpo.metric,
            mode=hpo.mode,
            num_samples=1,
            max_concurrent_trials=hpo.max_concurrent,
            scheduler=make_scheduler(hpo, driver.rungs),
        ),
        run_config=tune.RunConfig(
            name=EXPERIMENT,
            storage_path=scratch,
            callbacks=[SearchCallback()],
            failure_config=tune.FailureConfig(max_failures=spec.trainer.max_worker_restarts),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=KEEP_TRIAL_CHECKPOINTS),
            verbose=0,
        ),
    )
