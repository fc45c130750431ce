"""``orchestrator``'s own ``__init__``: the Python API's names, imported when first asked for."""

from __future__ import annotations

import pytest

import orchestrator

pytestmark = pytest.mark.unit


def test_the_apis_names_are_the_api_modules() -> None:
    from orchestrator import api

    for name in orchestrator.__all__:
        assert getattr(orchestrator, name) is getattr(api, name)
    assert set(orchestrator.__all__) <= set(dir(orchestrator))


def test_another_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        orchestrator.nope  # noqa: B018
