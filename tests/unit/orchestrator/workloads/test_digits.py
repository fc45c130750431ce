"""The digits workload (orchestrator/workloads/digits.py): its data read exactly as scikit-learn's loader reads it."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.unit


def test_digits_are_read_from_scikit_learns_file_exactly_as_its_loader_reads_them() -> None:
    from sklearn.datasets import load_digits

    from orchestrator.workloads.digits import digits_arrays

    x, y = digits_arrays()
    want_x, want_y = load_digits(return_X_y=True)
    assert x.shape == (1797, 64) and x.dtype == want_x.dtype and y.dtype == want_y.dtype
    assert np.array_equal(x, want_x) and np.array_equal(y, want_y)
