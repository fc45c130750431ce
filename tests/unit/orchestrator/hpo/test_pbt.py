"""PBT's decisions as data: explore stays in the space and is a function of its seed; a
snapshot's decisions are checked before a resumed search believes them."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.hpo.pbt import Exploit, decision_rng, explore, read_exploits
from orchestrator.hpo.space import in_space, parse_distribution, sample_configs

pytestmark = pytest.mark.unit
SPACE = {
    "lr": "loguniform 0.001 0.3",
    "hidden_size": "choice 8 16 32",
    "job.params.q": "quniform 8 64 8",
    "trainer.grad_clip_norm": "uniform 0.5 2.0",
    "job.params.k": "randint 1 4",
    "batch_size": "grid 16 32",
}


def test_explore_moves_every_key_within_its_distribution_and_is_a_function_of_its_seed() -> None:
    donors = sample_configs(SPACE, 50, seed=0)
    moved = 0
    for i, donor in enumerate(donors):
        rng = decision_rng(7, f"trial_{i:05d}", 4)
        out = explore(SPACE, donor, rng)
        assert out == explore(SPACE, donor, decision_rng(7, f"trial_{i:05d}", 4))
        assert all(in_space(*parse_distribution(k, SPACE[k]), v) for k, v in out.items()), out
        assert isinstance(out["job.params.q"], int) and isinstance(out["job.params.k"], int)
        moved += out != donor
    assert moved == len(donors)
    assert explore(SPACE, donors[0], decision_rng(7, "trial_00000", 6)) != explore(
        SPACE, donors[0], decision_rng(7, "trial_00000", 4)
    )


def test_a_number_moves_by_a_fifth_and_a_choice_to_its_neighbour() -> None:
    space = {"x": "uniform 0.1 10", "c": "choice 1 2 3 4"}
    seen_x, seen_c = set(), set()
    for i in range(200):
        out = explore(space, {"x": 1.0, "c": 3}, decision_rng(0, "t", i))
        seen_x.add(round(out["x"], 6))
        seen_c.add(out["c"])
    assert {0.8, 1.2} <= seen_x and {2, 4} <= seen_c  # and resampled ones besides


def _exploit(**changes: Any) -> dict[str, Any]:
    values = sample_configs(SPACE, 1, seed=1)[0]
    return {**Exploit("trial_00001", "trial_00000", 4, 4, values).to_json(), **changes}


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"trial_id": "trial_00009"}, "names trials"),
        ({"donor_id": "trial_00001"}, "names trials"),
        ({"iteration": 0}, "iteration is not"),
        ({"donor_iteration": 7}, "donor_iteration is not"),
        ({"values": {"lr": 0.1}}, "values are not"),
        ({"extra": 1}, "not an exploit record"),
    ],
)
def test_a_decision_the_search_could_not_have_made_is_refused(change: dict[str, Any], words: str) -> None:
    ids = {"trial_00000", "trial_00001"}
    assert read_exploits([_exploit()], SPACE, ids, 6) == [Exploit(**_exploit())]
    with pytest.raises(ValueError, match=words):
        read_exploits([_exploit(**change)], SPACE, ids, 6)
    bad = _exploit()
    bad["values"] = {**bad["values"], "hidden_size": 12}
    with pytest.raises(ValueError, match=r"values\.hidden_size is not a value"):
        read_exploits([bad], SPACE, ids, 6)


def test_pbt_perturbs_the_keys_of_non_integer_values_unless_told_which() -> None:
    from orchestrator.hpo.pbt import mutable_keys

    assert mutable_keys(SPACE, []) == ["lr", "trainer.grad_clip_norm"]
    assert mutable_keys(SPACE, ["batch_size", "lr"]) == ["lr", "batch_size"]
    donor = sample_configs(SPACE, 1, seed=2)[0]
    for i in range(20):
        out = explore(SPACE, donor, decision_rng(0, "t", i), ["lr"])
        assert {k: v for k, v in out.items() if k != "lr"} == {k: v for k, v in donor.items() if k != "lr"}
