"""Fixtures of the loop's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ray.train.v2._internal.execution.train_fn_utils import LocalTrainFnUtils

from tests.support.func_worker import local_train_worker


@pytest.fixture
def ray_worker() -> Iterator[LocalTrainFnUtils]:
    """This process as a one-worker Ray Train group (Ray's local mode utils)."""
    with local_train_worker() as inner:
        yield inner
