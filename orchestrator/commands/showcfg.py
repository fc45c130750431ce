"""``--cfg job|hydra|all``: the composed config as YAML, and the Hydra settings honoured.

``--cfg job`` prints the typed config a run gets (resolved: interpolations and relative
paths as the run sees them), headed so that it is a config of its own: saved as
``DIR/experiment/NAME.yaml``, ``--config-dir DIR +experiment=NAME`` composes the same
config again (its defaults list picks the same group options; appended last, its values
win). A notify target that may hold a token is never printed whole: it is named as a
run's config.json names it (``notify.secret:https://host``), which a config fed back is
refused for, naming the key, until the target is given again (notify.webhook=env:VARNAME,
which names no secret, is printed as it is).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from orchestrator.config.cli import Options
from orchestrator.config.compose import Composed, primary_defaults
from orchestrator.config.schema import JobConfig, NotifyConfig, env_name, kept_shown
from orchestrator.wire.codec import to_plain
from orchestrator.workloads import JOB_KEY_WORKLOADS

# Job keys only the built-ins of JOB_KEY_WORKLOADS read (the others take job.params).
BUILTIN_JOB_KEYS = ("lr", "hidden_size", "eval_fraction")

# The group under which a printed config is saved to be fed back (Hydra's convention).
SAVED_GROUP = "experiment"


def shown_notify(notify: NotifyConfig) -> tuple[NotifyConfig, list[str]]:
    """notify.* as a run's config.json holds it (orchestrator/notify/secret.py): a target
    that may carry a token named by what may be shown of it, ``notify.secret:scheme://host``
    or ``notify.secret:PROGRAM``, which a command line refuses, naming the key, until it is
    given again; ``env:VARNAME`` names no secret and stays. Also the keys so kept out."""
    from orchestrator.notify.secret import kept

    env_webhook = env_name(notify.webhook) is not None
    # kept() takes targets given whole: env:VARNAME is read at a run's start, never kept.
    shown = kept(replace(notify, webhook=None) if env_webhook else notify)
    if env_webhook:
        shown = replace(shown, webhook=notify.webhook)
    withheld = [k for k, v in (("notify.webhook", shown.webhook), ("notify.command", shown.command)) if kept_shown(v)]
    return shown, withheld


def _escaped(value: Any) -> Any:
    """Strings as OmegaConf reads them back literally: a '${' in a value (one the user
    escaped) would be an interpolation."""
    if isinstance(value, dict):
        return {k: _escaped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    if isinstance(value, str):
        return value.replace("${", "\\${")
    return value


def _yaml(plain: dict[str, Any]) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(plain))


def unread_job_keys(job: JobConfig) -> tuple[str, ...]:
    """The job keys the job's workload (or train function) never reads: printed, they would
    read as settings of the run (``job=gpt`` showing ``job.lr: 0.01``); left out, a config
    fed back gets their defaults, which nothing reads either."""
    return () if job.workload in JOB_KEY_WORKLOADS else BUILTIN_JOB_KEYS


def job_yaml(composed: Composed) -> str:
    """--cfg job: the config, headed as a config of the group SAVED_GROUP."""
    cfg = composed.config
    notify, withheld = shown_notify(cfg.notify)
    plain = {**to_plain(cfg), "notify": to_plain(notify)}
    unread = unread_job_keys(cfg.job)
    plain["job"] = {k: v for k, v in plain["job"].items() if k not in unread}
    groups = [(g, composed.choices[g]) for g, option in primary_defaults() if option is not None]
    header = [
        "# @package _global_",
        "# The config python -m orchestrator composed (--cfg job). To compose it again, save it as",
        f"# DIR/{SAVED_GROUP}/NAME.yaml and give: --config-dir DIR +{SAVED_GROUP}=NAME",
    ]
    if unread:
        what = f"the {cfg.job.workload} workload" if cfg.job.workload else "a train function"
        header.append(f"# Left out, {what} does not read them: {', '.join('job.' + k for k in unread)}")
    if withheld:
        header.append(
            f"# Kept out, as a run's config.json keeps it (it may hold a token): {', '.join(withheld)}; "
            "give it again with KEY=VALUE"
        )
    defaults = ["defaults:", *(f"  - override /{g}: {o}" for g, o in groups if o != "null"), "  - _self_"]
    return "\n".join([*header, *defaults, _yaml(_escaped(plain)).rstrip("\n")]) + "\n"


def hydra_yaml(composed: Composed) -> str:
    """--cfg hydra: the Hydra settings this command honours, as Hydra names them: the
    search path given (--config-dir, hydra.searchpath), and what composing chose."""
    ours = composed.searchpath[:1]
    given = [s for s in composed.searchpath if s not in ours and not s.startswith("structured://")]
    node = {
        "hydra": {
            "searchpath": given,
            "runtime": {"choices": dict(composed.choices), "config_sources": list(composed.searchpath)},
        }
    }
    return "# The Hydra settings this command honours (--cfg hydra); it refuses the others.\n" + _yaml(node)


def cfg_yaml(composed: Composed, kind: str) -> str:
    if kind == "job":
        return job_yaml(composed)
    if kind == "hydra":
        return hydra_yaml(composed)
    return job_yaml(composed) + hydra_yaml(composed)


def main(opts: Options) -> int:
    """--cfg (the config as YAML) or --info (where configs come from): launch nothing."""
    from orchestrator.commands.run import check_regions
    from orchestrator.commands.usage import info
    from orchestrator.config.compose import compose_full

    composed = compose_full(opts.overrides)
    check_regions(composed.config)
    text = cfg_yaml(composed, opts.cfg) if opts.cfg is not None else info(composed, str(opts.info))
    print(text.rstrip("\n"))
    return 0
