"""The fast way from a composed mapping to the config's dataclasses gives exactly what
OmegaConf's merge gives, and steps aside for anything that needs a conversion or a refusal."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from orchestrator.config.compose import CONF_DIR, compose
from orchestrator.config.compose_cache import schema
from orchestrator.config.schema import Config, TrainerConfig
from orchestrator.config.typed import build

pytestmark = pytest.mark.unit


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


CASES = [
    *([f"job={j}"] for j in _options("job")),
    *([f"cloud={c}"] for c in _options("cloud")),
    *([f"chaos={c}"] for c in _options("chaos")),
    ["job=digits_hpo", "trainer.autocast=bf16", "data.loader=sharded", "notify.webhook=null"],
]


def _plain(cfg: Config) -> dict[str, Any]:
    return dataclasses.asdict(cfg)  # enums stay members, as OmegaConf.to_container leaves them


@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o))
def test_the_fast_way_gives_what_omegaconf_gives(overrides: list[str]) -> None:
    plain = _plain(compose(overrides))
    fast = build(Config, plain)
    assert fast is not None
    assert fast == OmegaConf.to_object(OmegaConf.merge(schema(Config), plain))


@pytest.mark.parametrize(
    "change",
    [
        {"workers": "2"},  # a conversion OmegaConf makes
        {"workers": 2.0},
        {"workers": True},
        {"autocast": "no_such_option"},
        {"grad_accum_steps": None},
        {"not_a_key": 1},
    ],
    ids=str,
)
def test_anything_that_needs_a_conversion_or_a_refusal_is_left_to_omegaconf(change: dict[str, Any]) -> None:
    plain = dataclasses.asdict(TrainerConfig())
    assert build(TrainerConfig, plain) == TrainerConfig()
    assert build(TrainerConfig, {**plain, **change}) is None


def test_a_missing_key_is_left_to_omegaconf_and_a_float_takes_an_int() -> None:
    plain = dataclasses.asdict(TrainerConfig())
    missing = dict(plain)
    missing.pop("workers")
    assert build(TrainerConfig, missing) is None
    floats = [f.name for f in dataclasses.fields(TrainerConfig) if f.type in ("float", float)]
    assert floats
    got = build(TrainerConfig, {**plain, floats[0]: 3})
    assert got is not None and type(getattr(got, floats[0])) is float
