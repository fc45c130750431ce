"""Values derived from the config: the workers a region fits, the run's last step, the
plain-http endpoint a fault proxy stands in front of."""

from __future__ import annotations

from orchestrator.config.schema import Config, RegionConfig, TrainerConfig
from orchestrator.hpo import max_search_steps, trial_count


def region_workers(region: RegionConfig, trainer: TrainerConfig, gpus: bool = True) -> int:
    """Workers the region fits: its nodes, each of num_cpus CPUs and num_gpus GPUs
    (SkyPilot's: its accelerators' count); ``gpus`` False: by CPUs alone."""
    from recovery.elastic import capacity

    per_node = float(region.num_gpus)
    if not per_node and region.accelerators:
        per_node = _accelerator_count(region.accelerators)
    return capacity(
        region.node_count(),
        region.num_cpus,
        per_node,
        trainer.cpus_per_worker,
        trainer.gpus_per_worker if gpus else 0.0,
    )


def _accelerator_count(accelerators: str) -> float:
    # SkyPilot's "A10G:1" per node; a bad one is its validate_region's to refuse.
    try:
        return float(accelerators.rsplit(":", 1)[1]) if ":" in accelerators else 1.0
    except ValueError:
        return 0.0


def total_steps(cfg: Config) -> int:
    """The run's last step: job.steps, or for a search its most search steps (see orchestrator/hpo.py)."""
    if cfg.hpo.enabled:
        return max_search_steps(trial_count(cfg.hpo.search_space, cfg.hpo.num_samples), cfg.hpo.max_t)
    return cfg.job.steps


def proxy_target(region: RegionConfig) -> tuple[str, int] | None:
    """(host, port) of a store's plain-http endpoint, which a fault proxy can stand in front of."""
    from urllib.parse import urlparse

    if not region.store.startswith(("s3://", "gs://", "gcs://")):
        return None
    endpoint = region.storage_options.get("endpoint_url")
    if not endpoint:
        return None
    url = urlparse(str(endpoint))
    if url.scheme != "http" or not url.hostname:
        return None
    return url.hostname, url.port or 80
