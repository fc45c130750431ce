"""benchmarks/ddp_options.py's pure part: the figures from each size's rounds."""

from __future__ import annotations

import pytest

from benchmarks.ddp_options import figures

pytestmark = pytest.mark.unit


def test_each_size_gets_its_medians_and_ratio_and_the_plain_ratio_is_the_last_sizes() -> None:
    rounds = {128: {False: [100.0, 120.0, 110.0], True: [80.0, 70.0, 90.0]}, 1024: {False: [40.0], True: [30.0]}}
    out = figures(4, rounds)
    assert out["world"] == 4
    assert (out["h128_steps_per_s_default"], out["h128_steps_per_s_exact"]) == (110.0, 80.0)
    assert out["h128_steps_ratio_exact_vs_default"] == pytest.approx(0.727)
    assert out["h1024_steps_ratio_exact_vs_default"] == out["steps_ratio_exact_vs_default"] == 0.75
