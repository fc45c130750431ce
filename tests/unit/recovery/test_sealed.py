"""Sealed objects of the control store: what opens is what was sealed, under that key."""

from __future__ import annotations

import json

import pytest

from recovery.sealed import seal, unseal

pytestmark = pytest.mark.unit
KEY = b"k" * 32


def test_what_was_sealed_opens_and_nothing_else_does() -> None:
    body = {"a": 1, "b": [1, 2]}
    assert unseal(seal(body, KEY), KEY, {"a", "b"}, "a thing") == body
    assert unseal(seal(body, b"o" * 32), KEY, {"a", "b"}, "a thing") == (
        "does not verify under this run's key (altered, or another key's)"
    )
    assert unseal(seal(body, KEY), KEY, {"a"}, "a thing") == "has fields other than a thing's"
    altered = json.loads(seal(body, KEY))
    altered["a"] = 2
    assert "does not verify" in str(unseal(json.dumps(altered).encode(), KEY, {"a", "b"}, "a thing"))
    assert unseal(b"\xff", KEY, {"a"}, "a thing") == "is not JSON"
    assert unseal(b"[1]", KEY, {"a"}, "a thing") == "is not a thing"
