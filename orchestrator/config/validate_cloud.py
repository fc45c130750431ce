"""The checks of cloud.*: regions, their stores (no credential in a URL or in options),
the candidates, that the trainer fits somewhere, and each region's preemption notice URL."""

from __future__ import annotations

import math
from typing import Any

from orchestrator.config.checks import (
    MAX_REGION_NAME,
    NAME_RULE,
    non_negative_int,
    positive_int,
    safe_name,
    seconds,
)
from orchestrator.config.derived import region_workers
from orchestrator.config.schema import Config, RegionConfig
from orchestrator.errors import ConfigError
from orchestrator.wire.codec import show
from orchestrator.wire.sections import NoticeSource
from recovery.controlkey import parse_source
from recovery.storage import STORE_PROTOCOLS, find_secret, has_userinfo

# The store's per-call deadline, in seconds (recovery.storage.op_timeout).
OP_TIMEOUT = "op_timeout_s"
_CREDENTIAL_CHAINS = (
    "use the standard chains: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile for s3://, "
    "GOOGLE_APPLICATION_CREDENTIALS for gs://"
)


def validate_cloud(cfg: Config) -> None:
    cloud = cfg.cloud
    if not cloud.regions:
        raise ConfigError("cloud.regions", f"cloud {cloud.name!r} defines no region")
    seconds("cloud.provision_timeout_s", cloud.provision_timeout_s)
    for name, region in cloud.regions.items():
        if not safe_name(name) or len(name) > MAX_REGION_NAME:
            raise ConfigError(
                f"cloud.regions.{show(name)[1:-1]}", f"region names are at most {MAX_REGION_NAME} {NAME_RULE}"
            )
        _validate_url(f"cloud.regions.{name}.store", region.store, "file:///path or s3://bucket/prefix")
        _validate_options(f"cloud.regions.{name}.storage_options", region.storage_options)
        positive_int(f"cloud.regions.{name}.num_cpus", region.num_cpus)
        positive_int(f"cloud.regions.{name}.nodes", region.nodes)
        positive_int(f"cloud.regions.{name}.num_nodes", region.num_nodes)
        if region.nodes != 1 and region.num_nodes != 1 and region.nodes != region.num_nodes:
            raise ConfigError(
                f"cloud.regions.{name}.nodes",
                f"got {region.nodes} but num_nodes is {region.num_nodes}; they name the same count, give one",
            )
        non_negative_int(f"cloud.regions.{name}.num_gpus", region.num_gpus)
        if region.hourly_cost is not None and not (math.isfinite(region.hourly_cost) and region.hourly_cost >= 0):
            raise ConfigError(
                f"cloud.regions.{name}.hourly_cost",
                f"got {show(region.hourly_cost)}; expected USD per node-hour, 0 or more "
                "(null: priced from the catalog)",
            )
        if not (math.isfinite(region.preemption_rate_per_h) and 0 <= region.preemption_rate_per_h <= 1000):
            raise ConfigError(
                f"cloud.regions.{name}.preemption_rate_per_h",
                f"got {show(region.preemption_rate_per_h)}; expected losses an hour, 0..1000",
            )
        validate_notice(name, region)
    if cloud.control_store is not None:
        _validate_url(
            "cloud.control_store", cloud.control_store, "s3://bucket/control (the controller and the clusters reach it)"
        )
    _validate_options("cloud.control_options", cloud.control_options)
    try:
        parse_source(cloud.control_key)
    except ValueError as exc:
        raise ConfigError("cloud.control_key", str(exc)) from None
    seen: set[str] = set()
    for name in cloud.candidates:
        if name not in cloud.regions:
            raise ConfigError(
                "cloud.candidates",
                f"{name!r} is not a region of cloud {cloud.name!r}; allowed: {', '.join(cloud.regions)}",
            )
        if name in seen:
            raise ConfigError("cloud.candidates", f"{name!r} is listed twice")
        seen.add(name)
    # CPUs only here: each provider's validate_region checks GPUs its own way.
    fits = {name: region_workers(cloud.regions[name], cfg.trainer, gpus=False) for name in cfg.candidate_regions()}
    least = cfg.trainer.min_world()
    if fits and max(fits.values()) < least:
        name = max(fits, key=lambda n: fits[n])
        region = cloud.regions[name]
        raise ConfigError(
            "trainer.workers",
            f"{least} workers x {cfg.trainer.cpus_per_worker:g} CPUs (trainer.min_workers, or trainer.workers) "
            f"fit in no candidate region: the largest, {name!r}, has {region.node_count()} node(s) of "
            f"{region.num_cpus} CPUs; lower trainer.workers or trainer.cpus_per_worker, or raise "
            "cloud.regions.<name>.num_cpus or .nodes",
        )


def _validate_url(key: str, url: str, example: str) -> None:
    """A store's URL: absolute, of STORE_PROTOCOLS, with no credential in it."""
    if has_userinfo(url):
        raise ConfigError(
            key,
            "holds a user name or password ('user:pass@'); credentials do not belong in a config "
            f"(it is written to disk): remove it and {_CREDENTIAL_CHAINS}",
        )
    if "::" in url:
        raise ConfigError(
            key, f"got {show(url)}; '::' chains filesystems (fsspec), which a store does not take: give one URL"
        )
    if url.count("://") > 1:
        raise ConfigError(key, f"got {show(url)}; a store URL names one protocol: {example}")
    proto, sep, rest = url.partition("://")
    if not sep or proto not in STORE_PROTOCOLS:
        why = "; memory:// lives in one process, where no cluster reaches it" if proto == "memory" else ""
        raise ConfigError(
            key,
            f"got {show(url)}; expected a URL of {', '.join(p + '://' for p in STORE_PROTOCOLS)}, "
            f"such as {example}{why}",
        )
    if proto == "file" and not rest.startswith("/"):
        raise ConfigError(
            key,
            f"got {show(url)}; a file:// URL needs an absolute path: file:///abs/path (three slashes) or file://~/path",
        )
    if proto != "file" and not rest.split("/", 1)[0]:
        raise ConfigError(key, f"got {show(url)}; expected a bucket: {proto}://bucket/prefix")


def _validate_options(key: str, options: dict[str, Any]) -> None:
    """No credential at any depth of fsspec options (see recovery.storage.find_secret),
    and the per-call deadline (op_timeout_s) a duration like any other."""
    found = find_secret(options)
    if found is None:
        timeout = options.get(OP_TIMEOUT)
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, int | float):
                raise ConfigError(f"{key}.{OP_TIMEOUT}", f"got {show(timeout)}; expected seconds")
            seconds(f"{key}.{OP_TIMEOUT}", timeout)
        return
    path, why = found
    if why == "userinfo":
        message = "holds a user name or password in a URL ('user:pass@'); credentials do not belong in a config"
    else:
        message = "credentials do not belong in a config"
    raise ConfigError(f"{key}.{path}", f"{message} (it is written to disk); {_CREDENTIAL_CHAINS}")


def validate_notice(name: str, region: RegionConfig) -> None:
    """A region's preemption_notice_url: only where the region watches for a notice, and a
    plain-http base URL (what the runtime asks, without a proxy, with short timeouts)."""
    from urllib.parse import urlsplit

    key = f"cloud.regions.{name}.preemption_notice_url"
    url = region.preemption_notice_url
    if not url:
        return
    if region.notice_source() is NoticeSource.none:
        raise ConfigError(
            key,
            f"is set but region {name!r} watches for no notice (preemption_notice resolves to none); "
            f"set cloud.regions.{name}.preemption_notice=aws or gcp, or drop the URL",
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port out of range or not a number raises here
    except ValueError:
        parts = None
    if parts is not None and "@" in parts.netloc:
        # Not shown: what precedes the @ may be a password.
        raise ConfigError(key, "holds a user name or password ('user:pass@'); the metadata service takes none")
    if (
        parts is None
        or parts.scheme != "http"
        or not parts.hostname
        or parts.query
        or parts.fragment
        or any(c.isspace() or not c.isprintable() for c in url)
    ):
        raise ConfigError(
            key,
            f"got {show(url)}; expected the metadata service's base URL, http://host[:port] "
            "(plain http, no query or fragment), e.g. http://169.254.169.254",
        )
