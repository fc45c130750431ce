"""Hyperparameter search: the parts that need no Ray.

- ``space``: the search space (config paths and distributions) and the trials drawn from it;
- ``trials``: trials as records, search steps, the best trial;
- ``asha``: ASHA's rule as plain data;
- ``replay``: a searcher that proposes its own trials (Optuna), rebuilt from the recorded ones.
"""

from __future__ import annotations

from orchestrator.hpo.asha import AshaRungs, asha_rungs, quantile
from orchestrator.hpo.space import (
    HPO_DISTRIBUTIONS,
    MAX_TRIALS,
    Distribution,
    parse_distribution,
    sample_configs,
    trial_count,
    validate_search_space,
)
from orchestrator.hpo.trials import (
    ERROR,
    FINISHED,
    TERMINATED,
    TrialRecord,
    best_of,
    counts,
    max_search_steps,
    progress_text,
    search_step,
    trial_key,
)

__all__ = [
    "ERROR",
    "FINISHED",
    "HPO_DISTRIBUTIONS",
    "MAX_TRIALS",
    "TERMINATED",
    "AshaRungs",
    "Distribution",
    "TrialRecord",
    "asha_rungs",
    "best_of",
    "counts",
    "max_search_steps",
    "parse_distribution",
    "progress_text",
    "quantile",
    "sample_configs",
    "search_step",
    "trial_count",
    "trial_key",
    "validate_search_space",
]
