"""tracking.*: the config groups, their checks (one line naming the key), and the params a
tracker gets, with no credential among them."""

from __future__ import annotations

import pytest

from orchestrator.config.compose import compose
from orchestrator.errors import ConfigError
from orchestrator.tracking.records import HIDDEN, params

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
        (["tracking=wandb", "tracking.uri=http://127.0.0.1:5000"], "tracking.uri"),
        (["tracking=mlflow", "tracking.mode=offline"], "tracking.mode"),
        (["tracking=mlflow", "tracking.entity=team"], "tracking.entity"),
        (["tracking=mlflow", "tracking.tags.api_token=abc"], "tracking.tags.api_token"),
        (["tracking=mlflow", "tracking.tags.orchestrator.run_id=x"], "tracking.tags.orchestrator"),
        (["tracking=mlflow", "tracking.flush_every_s=0"], "tracking.flush_every_s"),
        (["tracking=mlflow", "tracking.kind=neptune"], "tracking.kind"),
    ],
)
def test_a_bad_key_is_one_line_naming_it(overrides: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as exc:
        compose(["job=digits", *overrides])
    assert str(exc.value).startswith(key) and "\n" not in str(exc.value)


def test_params_are_the_composed_config_flat_without_notify_or_credentials() -> None:
    cfg = compose(["job=digits", "tracking=mlflow", "notify.webhook=https://hooks.example.com/T0/secret"])
    p = params(cfg)
    assert p["job.name"] == "digits" and p["tracking.kind"] == "mlflow" and "trainer.workers" in p
    assert not any(k.startswith("notify") for k in p)
    assert not any("hooks.example.com" in v for v in p.values())
    assert all(v != HIDDEN for v in p.values())  # nothing in the default config looks like one
