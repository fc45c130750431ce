"""providers.warm: imports ahead, then runs the ``python -m`` command it is handed, as that command."""

from __future__ import annotations

import pytest

from providers.warm import parse_order

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("not json", "not JSON"),
        ("[]", "exactly"),
        ('{"module": "a", "args": [], "env": {}, "log": "/x", "more": 1}', "exactly"),
        ('{"module": "a;rm", "args": [], "env": {}, "log": "/x"}', "module"),
        ('{"module": "a", "args": [1], "env": {}, "log": "/x"}', "args"),
        ('{"module": "a", "args": [], "env": {"K": 1}, "log": "/x"}', "env"),
        ('{"module": "a", "args": [], "env": {}, "log": "rel.log"}', "absolute"),
    ],
)
def test_orders_are_checked(line: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_order(line)
    good = parse_order('{"module": "orchestrator.runtime", "args": ["s.json"], "env": {"K": "v"}, "log": "/l"}')
    assert good.module == "orchestrator.runtime" and good.args == ["s.json"] and good.env == {"K": "v"}
