"""hydra_errors: Hydra settings refused by name, and Hydra's errors as one line naming the key."""

from __future__ import annotations

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.hydra_errors import hydra_refusal, refuse_sweeps, refuse_unhonoured
from orchestrator.errors import ConfigError

pytestmark = pytest.mark.unit


def test_hydra_settings_are_refused_by_the_longest_prefix() -> None:
    assert hydra_refusal("hydra.searchpath") is None
    assert hydra_refusal("job.steps") is None
    assert "<home>/runs/<run_id>" in str(hydra_refusal("hydra.run.dir"))
    assert "no launcher plugin" in str(hydra_refusal("hydra/launcher"))
    assert "runs nothing through it" in str(hydra_refusal("hydra.foo"))


def test_unhonoured_settings_options_and_sweeps_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"^hydra.run.dir:"):
        refuse_unhonoured(["hydra.run.dir=/tmp/x"])
    with pytest.raises(ConfigError, match=r"^--bogus: not an option"):
        refuse_unhonoured(["--bogus"])
    with pytest.raises(ConfigError, match=r"^job.steps: '1,2' is a sweep"):
        refuse_sweeps(["job.steps=1,2"])
    refuse_sweeps(["job.steps=5"])


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["job.stepz=5"], "job.stepz", "did you mean 'job.steps'"),
        (["job.steps=many"], "job.steps", "expected an integer"),
        (["cloud=nowhere"], "cloud", "allowed:"),
        (["cloud.regions.zz.num_cpus=2"], "cloud.regions.zz", "is not a region of cloud"),
        (["trainer.autocast=fp8"], "trainer.autocast", "allowed: none, auto, bf16, fp16"),
        (["job.steps=[1"], "job.steps", "cannot parse"),
    ],
)
def test_hydras_errors_name_the_key(overrides: list[str], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose(overrides)
    assert err.value.key == key and words in str(err.value) and "\n" not in str(err.value)
