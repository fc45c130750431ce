"""A sweep's runs (orchestrator/commands/sweep.py): the product of the swept keys' values, parsed by Hydra's
override grammar, and each run's name."""

from __future__ import annotations

import pytest

from orchestrator.commands import sweep
from orchestrator.errors import ConfigError

pytestmark = pytest.mark.unit


def test_a_sweep_is_the_product_of_its_keys_values_first_key_slowest() -> None:
    s = sweep.expand(["job=digits", "job.lr=0.03,0.05", "trainer.workers=1,2", "progress=false"])
    assert s.keys == ("job.lr", "trainer.workers")
    assert s.runs == (
        ("job=digits", "job.lr=0.03", "trainer.workers=1", "progress=false"),
        ("job=digits", "job.lr=0.03", "trainer.workers=2", "progress=false"),
        ("job=digits", "job.lr=0.05", "trainer.workers=1", "progress=false"),
        ("job=digits", "job.lr=0.05", "trainer.workers=2", "progress=false"),
    )
    assert s.values(2) == ("0.05", "1")


@pytest.mark.parametrize(
    ("override", "values"),
    [
        # Hydra's grammar, not commas split by hand: lists and quotes stay whole.
        ("chaos.faults=[],[{kind:kill_region,at_step:120}]", ["[]", "[{kind:kill_region,at_step:120}]"]),
        ("job.params.sizes=[1,2],[3]", ["[1,2]", "[3]"]),
        ("job.name='a,b',c", ["'a,b'", "c"]),
        ("job.steps=range(10,40,10)", ["10", "20", "30"]),
        ("job.seed=choice(1,2)", ["1", "2"]),
        ("job.seed=sort(3,1,2)", ["1", "2", "3"]),
        ("+job.params.x=1,2", ["1", "2"]),
    ],
)
def test_sweep_values_are_parsed_by_hydras_override_grammar(override: str, values: list[str]) -> None:
    key = override.partition("=")[0]
    assert sweep.expand([override]).runs == tuple((f"{key}={v}",) for v in values)


def test_no_sweep_is_one_run_with_the_overrides_as_given() -> None:
    given = ["home=/tmp/a b", "job.name='x,y'", "chaos.faults=[{kind:kill_region,at_step:5}]", "~notify"]
    assert sweep.expand(given) == sweep.Sweep((), (tuple(given),))


def test_glob_picks_among_the_groups_options() -> None:
    options = {"job": ["digits", "digits_hpo", "gpt"]}
    s = sweep.expand(["job=glob(digits*)"], lambda g: options.get(g, []))
    assert s.runs == (("job=digits",), ("job=digits_hpo",))


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        ("job.lr=interval(0,1)", "job.lr", "interval() draws values"),
        ("job.lr=glob(*)", "job.lr", "config group's options"),
        ("job.lr=tag(x,1,2)", "job.lr", "cannot parse"),
    ],
)
def test_a_sweep_that_lists_no_values_is_refused_naming_its_key(override: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        sweep.expand([override])
    assert info.value.key == key and words in str(info.value)


def test_a_key_swept_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="swept twice"):
        sweep.expand(["job.lr=1,2", "job.lr=3,4"])


def test_a_run_id_given_once_names_the_sweep_and_one_swept_names_each_run() -> None:
    assert sweep.named(sweep.expand(["job.lr=1,2", "run_id=exp"])) == [
        ("job.lr=1", "run_id=exp-0"),
        ("job.lr=2", "run_id=exp-1"),
    ]
    assert sweep.named(sweep.expand(["run_id=a,b", "job.lr=1"])) == [("job.lr=1", "run_id=a"), ("job.lr=1", "run_id=b")]
    assert sweep.named(sweep.expand(["job.lr=1,2"])) == [("job.lr=1",), ("job.lr=2",)]
    with pytest.raises(ConfigError, match="names two runs 'a'"):
        sweep.named(sweep.expand(["run_id=a,a"]))
