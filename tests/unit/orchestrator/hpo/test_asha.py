"""ASHA's rule as data: the same stops as Tune's own bracket, and across a restore."""

from __future__ import annotations

import pytest

from orchestrator.hpo.asha import AshaRungs, asha_rungs, quantile
from orchestrator.hpo.trials import trial_key


def test_quantile_is_numpys_linear_percentile() -> None:
    np = pytest.importorskip("numpy")
    for values in ([1.0], [3.0, 1.0], [0.5, 0.1, 0.9, 0.7], [float(i) ** 1.5 for i in range(17)]):
        for q in (0.0, 0.5, 2 / 3, 0.75, 1.0):
            assert quantile(values, q) == pytest.approx(float(np.percentile(values, q * 100)))
    assert quantile([], 0.5) is None
    assert quantile([float("nan"), 1.0, 3.0], 0.5) == 2.0  # NaN ignored, as nanpercentile


def _results(seed: int, trials: int = 12, max_t: int = 9) -> list[tuple[str, int, float]]:
    """Results as an asynchronous search would send them: trials interleaved, each one's
    iterations in order."""
    import random

    rng = random.Random(seed)
    pending = {trial_key(i): 1 for i in range(trials)}
    quality = {t: rng.random() for t in pending}
    out = []
    while pending:
        t = rng.choice(sorted(pending))
        it = pending[t]
        out.append((t, it, quality[t] + 0.01 * it + rng.gauss(0, 0.05)))
        pending[t] = it + 1
        if it == max_t:
            del pending[t]
    return out


def _drive(rungs: AshaRungs, results: list[tuple[str, int, float]]) -> list[tuple[str, int]]:
    """Feed results, skipping a stopped trial's later ones; the (trial, iteration) stops."""
    stopped: dict[str, int] = {}
    for trial, it, value in results:
        if trial not in stopped and rungs.on_result(trial, it, value):
            stopped[trial] = it
    return sorted(stopped.items())


@pytest.mark.parametrize("mode", ["max", "min"])
def test_asha_rungs_decide_as_tunes_asha(mode: str) -> None:
    """The same results through Tune's own bracket and through AshaRungs: the same stops."""
    from ray.tune.schedulers.async_hyperband import _Bracket

    for seed in range(20):
        results = _results(seed)
        bracket = _Bracket(min_t=1, max_t=9, reduction_factor=3, s=0)
        sign = 1.0 if mode == "max" else -1.0
        theirs: dict[str, int] = {}
        for trial, it, value in results:
            if trial not in theirs and it < 9:
                if bracket.on_result(type("T", (), {"trial_id": trial})(), it, sign * value) == "STOP":
                    theirs[trial] = it
        ours = _drive(AshaRungs(asha_rungs(9, 1, 3), 3, mode), [r for r in results if r[1] < 9])
        assert ours == sorted(theirs.items()), seed
        assert ours, "no trial stopped: the comparison proves nothing"


def test_rungs_saved_mid_search_and_restored_decide_as_if_never_stopped() -> None:
    results = _results(7)
    whole = _drive(AshaRungs([1, 3], 3, "max"), results)
    first = AshaRungs([1, 3], 3, "max")
    stopped_early = _drive(first, results[:40])
    saved = first.to_json()
    assert saved.keys() == {"1", "3"} and all(saved.values())
    again = AshaRungs([1, 3], 3, "max")
    again.load(saved)
    # The restored half: trials the first half stopped stay stopped (they never report again).
    done = {t for t, _ in stopped_early}
    rest = _drive(again, [r for r in results[40:] if r[0] not in done])
    assert sorted(stopped_early + rest) == whole
