"""Which failures a survivor outlives."""

from __future__ import annotations

import pytest

from orchestrator.runtime.group.survivors import Survivors

pytestmark = pytest.mark.unit


class Rank(Survivors):
    def __init__(self, member: object) -> None:
        self.member = member


def gloo_error() -> RuntimeError:
    return RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:4527")


def test_a_collective_broken_by_a_lost_peer_is_survived_where_the_group_can_form_again() -> None:
    assert Rank(member=object()).survivable(gloo_error())
    # Wrapped, as a user's code or DDP may raise it.
    try:
        try:
            raise gloo_error()
        except RuntimeError as inner:
            raise ValueError("step failed") from inner
    except ValueError as outer:
        assert Rank(member=object()).survivable(outer)
    # Without the driver's rendezvous (survivors off): Ray Train restarts the group.
    assert not Rank(member=None).survivable(gloo_error())


def test_the_workloads_own_error_is_not_survived() -> None:
    assert not Rank(member=object()).survivable(ValueError("shapes do not match"))
    assert not Rank(member=object()).survivable(ZeroDivisionError())
