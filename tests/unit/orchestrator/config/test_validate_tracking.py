"""tracking.*: the config groups and their checks (validate_tracking), each refusal one
line naming the key: a tracker's URL, names and tags, and no credential in any of them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.schema import TrackerKind
from orchestrator.config.validate_tracking import MAX_NAME, MAX_TAG_VALUE, MAX_TAGS, validate_tracking
from orchestrator.errors import ConfigError

pytestmark = pytest.mark.unit


def test_the_default_is_no_tracker_and_each_group_names_its_kind() -> None:
    assert str(compose(["job=digits"]).tracking.kind) == "none"
    assert str(compose(["job=digits", "tracking=mlflow"]).tracking.kind) == "mlflow"
    cfg = compose(["job=digits", "tracking=wandb", "tracking.mode=offline", "tracking.tags.team=nlp"])
    assert (str(cfg.tracking.kind), str(cfg.tracking.mode), cfg.tracking.tags) == ("wandb", "offline", {"team": "nlp"})


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["tracking=mlflow", "tracking.uri=http://me:pw@127.0.0.1:5000"], "tracking.uri"),
        (["tracking=mlflow", "tracking.uri=http://127.0.0.1:5000/?token=abc"], "tracking.uri"),
        (["tracking=mlflow", "tracking.uri=ftp://host"], "tracking.uri"),
        (["tracking=mlflow", "tracking.uri=http:///no-host"], "tracking.uri"),
        (["tracking=wandb", "tracking.uri=http://127.0.0.1:5000"], "tracking.uri"),
        (["tracking=mlflow", "tracking.mode=offline"], "tracking.mode"),
        (["tracking=mlflow", "tracking.entity=team"], "tracking.entity"),
        (["tracking=mlflow", f"tracking.project={'p' * (MAX_NAME + 1)}"], "tracking.project"),
        (["tracking=mlflow", "tracking.tags.api_token=abc"], "tracking.tags.api_token"),
        (["tracking=mlflow", "tracking.tags.orchestrator.run_id=x"], "tracking.tags.orchestrator"),
        (["tracking=mlflow", f"tracking.tags.note={'n' * (MAX_TAG_VALUE + 1)}"], "tracking.tags.note"),
        (["tracking=mlflow", "tracking.flush_every_s=0"], "tracking.flush_every_s"),
        (["tracking=mlflow", "tracking.flush_every_s=601"], "tracking.flush_every_s"),
        (["tracking=mlflow", "tracking.kind=neptune"], "tracking.kind"),
    ],
)
def test_a_bad_key_is_one_line_naming_it(overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        compose(["job=digits", *overrides])
    assert str(exc.value).startswith(key) and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["tracking=mlflow", "tracking.uri=https://mlflow.example.com", "tracking.project=exp", "tracking.tags.team=a"],
        ["tracking=mlflow", "tracking.uri=file:///tmp/mlruns", "tracking.flush_every_s=600"],
        ["tracking=wandb", "tracking.entity=team", "tracking.mode=offline", "tracking.run_name=r1"],
    ],
)
def test_a_good_tracker_config_passes(overrides: list[str]) -> None:
    cfg = compose(["job=digits", *overrides])
    validate_tracking(cfg)  # composed once already: checking again is as quiet


def test_too_many_tags_is_refused_under_tracking_tags() -> None:
    cfg = compose(["job=digits", "tracking=mlflow"])
    many = replace(cfg, tracking=replace(cfg.tracking, tags={f"t{i}": "v" for i in range(MAX_TAGS + 1)}))
    with pytest.raises(ConfigError) as exc:
        validate_tracking(many)
    assert str(exc.value).startswith("tracking.tags")


def test_no_tracker_checks_nothing_of_tracking() -> None:
    cfg = compose(["job=digits"])
    ignored = replace(cfg, tracking=replace(cfg.tracking, uri="ftp://me:pw@host", flush_every_s=0.0))
    validate_tracking(ignored)  # tracking.kind=none: the rest of tracking.* is never used
    with pytest.raises(ConfigError):
        validate_tracking(replace(ignored, tracking=replace(ignored.tracking, kind=TrackerKind.mlflow)))
