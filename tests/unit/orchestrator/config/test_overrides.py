"""Overrides that would change nothing, or change the run unsaid (orchestrator.config.overrides)."""

from __future__ import annotations

import pytest

from orchestrator.config import overrides
from orchestrator.errors import ConfigError

pytestmark = pytest.mark.unit

GROUPS = ["job", "cloud", "recovery", "chaos", "data"]


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("job", overrides.SECTION),
        ("cloud.regions", overrides.REGIONS),
        ("cloud.regions.local-a", overrides.REGION),
        ("cloud.regions.local-a.store", overrides.FIELD),
        ("cloud.regions.local-a.storage_options", overrides.FREE),
        ("cloud.regions.local-a.storage_options.a.b", overrides.FREE),
        ("job.params.x", overrides.FREE),
        ("run_id", overrides.NULLABLE),
        ("notify.command", overrides.NULLABLE),
        ("action", overrides.FIELD),
        ("chaos.faults", overrides.FIELD),
        ("bogus", None),
        ("job.bogus", None),
        ("hydra/launcher", None),
    ],
)
def test_schema_kind_names_what_a_key_is(key: str, kind: str | None) -> None:
    assert overrides.schema_kind(key) == kind


@pytest.mark.parametrize(
    ("given", "key"),
    [
        (["cloud=local", "cloud=aws"], "cloud"),
        (["job=digits", "+job=gpt"], "job"),
        (["job={}"], "job"),
        (["cloud.regions={ }"], "cloud.regions"),
        (["job.params={}"], "job.params"),
        (["~action"], "action"),
        (["~job.steps"], "job.steps"),
        (["~cloud.regions"], "cloud.regions"),
    ],
)
def test_a_no_op_override_is_refused_naming_its_key(given: list[str], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        overrides.refuse_no_ops(given, GROUPS)
    assert err.value.key == key


@pytest.mark.parametrize(
    "given",
    [
        ["cloud=aws"],
        ["~cloud.regions.local-c"],
        ["~run_id"],
        ["job.params={a:1}"],
        ["job.steps=1", "job.steps=2"],
    ],
)
def test_overrides_that_change_something_pass(given: list[str]) -> None:
    overrides.refuse_no_ops(given, GROUPS)
