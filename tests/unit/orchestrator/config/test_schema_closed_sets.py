"""The config's closed sets are enums OmegaConf types: a value outside one is one line naming
the full key, the value given and the values allowed; config.json and the runtime's spec
still hold plain strings."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.saved import config_from_plain
from orchestrator.config.schema import Action, Mode, OutputFormat, PreemptionNotice, ProviderKind
from orchestrator.errors import ConfigError
from orchestrator.hpo import Distribution
from orchestrator.wire.codec import to_plain
from orchestrator.wire.faults import During, FaultKind
from orchestrator.wire.sections import Autocast, Loader, Scheduler
from tests.support.paths import REPO

ROOT = REPO


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path))
    return tmp_path


def refused(overrides: list[str]) -> ConfigError:
    """Refused by the config's checks or the provider's (as a run's command checks it)."""
    from orchestrator.commands.run import check_regions

    with pytest.raises(ConfigError) as info:
        check_regions(compose(overrides))
    assert "\n" not in str(info.value)
    return info.value


CASES = [
    (["action=explode"], "action", "explode", Action),
    (["action=list", "format=xml"], "format", "xml", OutputFormat),
    (["cloud.provider=bogus"], "cloud.provider", "bogus", ProviderKind),
    (
        ["cloud.regions.local-a.preemption_notice=azure"],
        "cloud.regions.local-a.preemption_notice",
        "azure",
        PreemptionNotice,
    ),
    (["trainer.autocast=fp8"], "trainer.autocast", "fp8", Autocast),
    (["data.loader=torch"], "data.loader", "torch", Loader),
    (["hpo.mode=maximize"], "hpo.mode", "maximize", Mode),
    (["hpo.scheduler=hyperband"], "hpo.scheduler", "hyperband", Scheduler),
    (
        ["chaos.faults=[{kind:kill_region,at_step:5},{kind:explode,at_step:6}]"],
        "chaos.faults[1].kind",
        "explode",
        FaultKind,
    ),
    (["chaos.faults=[{kind:kill_region,during:training}]"], "chaos.faults[0].during", "training", During),
]


@pytest.mark.parametrize(("overrides", "key", "value", "members"), CASES, ids=[c[1] for c in CASES])
def test_a_value_outside_a_closed_set_names_the_key_the_value_and_the_values_allowed(
    overrides: list[str], key: str, value: str, members: type
) -> None:
    err = refused(overrides)
    assert err.key == key
    assert str(err) == f"{key}: got {value!r}; allowed: {', '.join(m.value for m in members)}"


def test_a_fault_kind_outside_the_set_in_a_saved_config_is_named_by_its_index() -> None:
    d = json.loads(json.dumps(to_plain(compose(["run_id=r1", "chaos.faults=[{kind:kill_region,at_step:5}]"]))))
    d["chaos"]["faults"][0]["kind"] = "explode"
    with pytest.raises(ConfigError) as info:
        config_from_plain(d)
    assert info.value.key == "chaos.faults[0].kind"
    assert "got 'explode'; allowed: kill_region," in str(info.value)


def test_a_distribution_outside_the_set_names_the_search_space_key_and_the_distributions() -> None:
    err = refused(["job=digits_hpo", "hpo.search_space.lr='gaussian 0 1'"])
    assert err.key == "hpo.search_space.lr"
    assert ", ".join(Distribution) in str(err)


def test_values_in_the_sets_are_typed_as_members_and_compare_equal_to_their_strings() -> None:
    cfg = compose(["trainer.autocast=bf16", "chaos.faults=[{kind:kill_region,during:provisioning}]"])
    assert cfg.trainer.autocast is Autocast.bf16 and cfg.trainer.autocast == "bf16"
    assert cfg.chaos.faults[0].kind is FaultKind.kill_region and cfg.chaos.faults[0].kind == "kill_region"
    assert cfg.chaos.faults[0].during is During.provisioning
    assert cfg.action is Action.run and cfg.cloud.provider == "local"


def test_to_plain_holds_plain_strings_and_reads_back() -> None:
    cfg = compose(["run_id=r1", "hpo.scheduler=fifo", "chaos.faults=[{kind:preempt,during:restore}]"])
    plain = to_plain(cfg)
    values = [plain["action"], plain["cloud"]["provider"], plain["hpo"]["scheduler"], plain["trainer"]["autocast"]]
    values += [plain["chaos"]["faults"][0]["kind"], plain["chaos"]["faults"][0]["during"]]
    assert values == ["run", "local", "fifo", "none", "preempt", "restore"]
    assert all(type(v) is str for v in values)
    assert config_from_plain(json.loads(json.dumps(plain))) == cfg


def test_every_provider_kind_has_a_provider_and_every_provider_a_kind() -> None:
    from providers.registry import PROVIDERS, REGION_CHECKS

    assert set(PROVIDERS) == set(ProviderKind)
    assert set(REGION_CHECKS) <= set(ProviderKind)


def test_the_config_module_imports_no_provider_module() -> None:
    tree = ast.parse((ROOT / "orchestrator" / "config" / "schema.py").read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m.split(".")[0] == "providers"]


def test_a_skypilot_region_without_accelerators_is_refused_when_the_run_wants_gpus() -> None:
    err = refused(["cloud=aws", "trainer.gpus_per_worker=1"])
    assert err.key.startswith("cloud.regions.") and err.key.endswith(".accelerators")
    assert "trainer.gpus_per_worker=1" in str(err)


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (lambda d: d.update(chaos="x"), "chaos: got 'x'; expected a mapping of its keys"),
        (lambda d: d["chaos"].update(faults="x"), "chaos.faults: got 'x'; expected a list"),
        (lambda d: d["chaos"].update(faults=[5]), "chaos.faults[0]: got 5; expected a mapping of its keys"),
        (lambda d: d["job"].update(lr=None), "job.lr: got None; expected a number"),
    ],
)
def test_a_saved_config_of_the_wrong_shape_is_one_line_naming_the_key(edit, line: str) -> None:
    d = json.loads(json.dumps(to_plain(compose(["run_id=r1"]))))
    edit(d)
    with pytest.raises(ConfigError) as info:
        config_from_plain(d)
    assert str(info.value) == line
