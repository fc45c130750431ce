"""The checks of chaos.faults: each fault's kind, trigger, region and node against the run."""

from __future__ import annotations

from orchestrator.config.checks import MAX_FAULTS, at_least, bounded_int, safe_name, seconds
from orchestrator.config.derived import proxy_target, total_steps
from orchestrator.config.schema import Config, FaultConfig
from orchestrator.errors import ConfigError
from orchestrator.wire.faults import (
    AT_POINT,
    CONTROLLER_FAULTS,
    DURING,
    NODE_FAULTS,
    STORAGE_FAULTS,
    TAKEOVER_FAULTS,
    NodeRole,
)
from orchestrator.wire.faults import SEARCH_FAULTS as HPO_FAULTS
from orchestrator.wire.sections import MAX_SEED


def validate_objectives(cfg: Config) -> None:
    o = cfg.chaos.objectives
    if o.max_rto_s is not None:
        seconds("chaos.objectives.max_rto_s", o.max_rto_s)
    if o.max_lost_steps is not None and o.max_lost_steps < 0:
        raise ConfigError("chaos.objectives.max_lost_steps", f"got {o.max_lost_steps}; expected an integer >= 0")
    if o.exact is not None and not safe_name(o.exact):
        raise ConfigError(
            "chaos.objectives.exact", f"got {o.exact!r}; expected the run_id of a finished run under home to match"
        )


def validate_chaos(cfg: Config) -> None:
    validate_objectives(cfg)
    if len(cfg.chaos.faults) > MAX_FAULTS:
        raise ConfigError("chaos.faults", f"lists {len(cfg.chaos.faults)} faults; at most {MAX_FAULTS} in one drill")
    for i, fault in enumerate(cfg.chaos.faults):
        if cfg.hpo.enabled and fault.kind not in HPO_FAULTS:
            raise ConfigError(
                f"chaos.faults[{i}].kind",
                f"got {fault.kind!r}; a search (hpo.enabled) takes: {', '.join(HPO_FAULTS)}",
            )
        if fault.region is not None and fault.region not in cfg.candidate_regions():
            raise ConfigError(
                f"chaos.faults[{i}].region",
                f"got {fault.region!r}; allowed: {', '.join(cfg.candidate_regions())}",
            )
        seconds(f"chaos.faults[{i}].duration_s", fault.duration_s, off=True)
        at_least(f"chaos.faults[{i}].latency_ms", fault.latency_ms, 1, "ms", off=True)
        at_least(f"chaos.faults[{i}].bandwidth_kbps", fault.bandwidth_kbps, 1, "kbps", off=True)
        if fault.kind in STORAGE_FAULTS:
            regions = [fault.region] if fault.region else cfg.candidate_regions()
            for r in regions:
                if proxy_target(cfg.cloud.regions[r]) is None and not _served_locally(cfg, r):
                    raise ConfigError(
                        f"chaos.faults[{i}].kind",
                        f"{fault.kind} needs region {r!r} to keep its store behind a plain-http endpoint "
                        f"(s3:// or gs:// with storage_options.endpoint_url), e.g. cloud=local_cloudstores",
                    )
        if fault.kind == "storage_slow" and fault.bandwidth_kbps <= 0 and fault.latency_ms <= 0:
            raise ConfigError(
                f"chaos.faults[{i}].bandwidth_kbps", "storage_slow needs bandwidth_kbps > 0 or latency_ms > 0"
            )
        _validate_trigger(cfg, i, fault)
        _validate_node_fault(cfg, i, fault)
    kinds = {f.kind for f in cfg.chaos.faults}
    for kind in sorted(kinds & set(CONTROLLER_FAULTS)):
        if kinds & set(STORAGE_FAULTS):
            raise ConfigError(
                "chaos.faults",
                f"{kind} cannot be combined with storage faults: their fault proxies live in the "
                "controller and go down with it; drill them in separate runs",
            )
    for i, fault in enumerate(cfg.chaos.faults):
        if fault.kind in TAKEOVER_FAULTS and not cfg.cloud.control_store:
            raise ConfigError(
                f"chaos.faults[{i}].kind",
                f"{fault.kind} is survived by a takeover from the control store: set cloud.control_store "
                "(e.g. file:///shared/control) and the control key (cloud.control_key)",
            )
        if fault.kind == "controller_freeze" and fault.duration_s <= 0:
            raise ConfigError(
                f"chaos.faults[{i}].duration_s",
                "controller_freeze needs duration_s > 0: how long the controller stays stopped",
            )


def _validate_node_fault(cfg: Config, i: int, fault: FaultConfig) -> None:
    """kill_node and hang_node strike a worker node (1 ...) of a region that has one."""
    key = f"chaos.faults[{i}]"
    if fault.kind not in NODE_FAULTS:
        if fault.node is not None:
            raise ConfigError(f"{key}.node", f"{fault.kind} takes no node; only {' and '.join(NODE_FAULTS)} do")
        if fault.node_role != NodeRole.training:
            raise ConfigError(
                f"{key}.node_role", f"{fault.kind} strikes no node; only {' and '.join(NODE_FAULTS)} take a node_role"
            )
        return
    if fault.node is not None and fault.node_role != NodeRole.training:
        raise ConfigError(
            f"{key}.node_role",
            f"got node_role: {fault.node_role} with node: {fault.node}; name a node, or draw one of a role, not both",
        )
    bounded_int(f"{key}.seed", fault.seed, 0, MAX_SEED)
    if fault.node is not None and fault.node < 1:
        raise ConfigError(
            f"{key}.node",
            f"got {fault.node}; expected a worker node's index, 1 or more (the head, 0, is kill_head's), "
            "or null to draw one from seed",
        )
    regions = [fault.region] if fault.region else cfg.candidate_regions()
    most = max(cfg.cloud.regions[r].node_count() for r in regions)
    if most < 2:
        where = f"region {fault.region!r} has none" if fault.region else "no candidate region has one"
        raise ConfigError(
            f"{key}.kind",
            f"{fault.kind} strikes a worker node and {where}: set cloud.regions.<name>.nodes to 2 or more",
        )
    if fault.node is not None and fault.node >= most:
        raise ConfigError(
            f"{key}.node",
            f"got {fault.node}; the regions it may strike have worker nodes 1..{most - 1} "
            "(cloud.regions.<name>.nodes counts the head)",
        )


def _validate_trigger(cfg: Config, i: int, fault: FaultConfig) -> None:
    key = f"chaos.faults[{i}]"
    given = [
        name
        for name, value in (
            ("at_step", fault.at_step),
            ("after_s", fault.after_s),
            ("during", fault.during),
            ("random", fault.random),
        )
        if value is not None
    ]
    if len(given) != 1:
        raise ConfigError(
            key,
            f"{fault.kind} needs exactly one trigger, got {', '.join(given) or 'none'}; give one of "
            "at_step: N, after_s: SECONDS, during: " + "|".join(DURING) + ", random: {seed: S, rate: R}",
        )
    if fault.repeat < 1:
        raise ConfigError(f"{key}.repeat", f"got {fault.repeat}; expected an integer >= 1")
    last = total_steps(cfg)
    if fault.at_step is not None and not 1 <= fault.at_step <= last:
        what = "search steps: trials * (hpo.max_t + 1)" if cfg.hpo.enabled else "job.steps"
        raise ConfigError(f"{key}.at_step", f"got {fault.at_step}; expected a step in 1..{last} ({what})")
    if cfg.hpo.enabled and fault.at_step is None:
        raise ConfigError(key, f"a search (hpo.enabled) triggers {fault.kind} by at_step (a search step) only")
    if fault.after_s is not None:
        seconds(f"{key}.after_s", fault.after_s)
    if fault.random is not None:
        bounded_int(f"{key}.random.seed", fault.random.seed, 0, MAX_SEED)
    if fault.random is not None and not 0.0 < fault.random.rate <= 1.0:
        raise ConfigError(f"{key}.random.rate", f"got {fault.random.rate}; expected 0 < rate <= 1")
    seconds(f"{key}.grace_s", fault.grace_s)
    if fault.graceful and fault.kind != "kill_region":
        raise ConfigError(
            f"{key}.graceful", f"got graceful: true for {fault.kind}; only kill_region is cancelled with a grace period"
        )
    if fault.count < 1:
        raise ConfigError(f"{key}.count", f"got {fault.count}; expected an integer >= 1 (health checks that fail)")
    if fault.kind == "user_error" and (fault.after_s is not None or fault.during not in (None, "restore")):
        raise ConfigError(
            key, "user_error is raised by the workload itself: trigger it with at_step, random or during: restore"
        )
    if fault.kind == "corrupt_peer_state" and fault.at_step is None and fault.random is None:
        raise ConfigError(
            key, "corrupt_peer_state strikes the workers' memory at a step: trigger it with at_step or random"
        )
    if fault.kind == "kill_worker" and fault.after_s is not None:
        raise ConfigError(
            f"{key}.after_s", "kill_worker picks its victim at a rendezvous: use at_step, random or during"
        )
    if fault.during is None:
        return
    allowed = AT_POINT.get(fault.during)
    if allowed is not None and fault.kind not in allowed:
        raise ConfigError(
            f"{key}.during",
            f"{fault.kind} needs a running attempt; during: {fault.during} allows {', '.join(allowed)}",
        )


def _served_locally(cfg: Config, region: str) -> bool:
    """cloud.local_servers gives this region a plain-http endpoint when the run starts (before its proxies)."""
    r = cfg.cloud.regions[region]
    object_store = r.store.split("://", 1)[0] in ("s3", "gs")
    return cfg.cloud.local_servers and object_store and not r.storage_options.get("endpoint_url")
