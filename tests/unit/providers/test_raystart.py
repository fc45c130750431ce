"""providers.raystart's own flag --join-on-loopback: 127.0.0.1 stays this node's address."""

from __future__ import annotations

import pytest

from providers import raystart

pytestmark = pytest.mark.unit


def test_join_on_loopback_keeps_loopback_and_resolves_the_rest_as_ray_would(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray._private import ray_constants, services

    monkeypatch.setattr(services, "resolve_ip_for_localhost", lambda host: "10.0.0.7")
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)
    raystart._join_on_loopback()
    assert ray_constants.ENABLE_RAY_CLUSTER is True
    assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
    assert services.resolve_ip_for_localhost("localhost") == "10.0.0.7"


def test_no_api_server_starts_no_dashboard_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray._private import node, services

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the dashboard's process was started")

    monkeypatch.setattr(services, "start_api_server", started)
    monkeypatch.setattr(node.Node, "start_api_server", node.Node.start_api_server)
    raystart._no_api_server()
    head = object.__new__(node.Node)
    head.start_api_server(include_dashboard=False, raise_on_failure=False)
    assert head._webui_url == ""


def test_no_api_server_is_refused_beside_a_dashboard(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr("sys.argv", ["raystart", "start", "--head", "--include-dashboard=true", raystart.NO_API_SERVER])
    assert raystart.main() == 2
    assert "--include-dashboard=false" in capsys.readouterr().err


class _Gcs:
    """A GCS whose node registers at the ``after``-th look (no socket: the client's calls are counted)."""

    def __init__(self, after: int) -> None:
        self.after, self.looks, self.selectors = after, 0, []

    def __call__(self, address: str) -> _Gcs:
        self.address = address
        return self

    def get_all_node_info(self, timeout: float, node_selectors: list, state_filter: int) -> dict:
        self.looks += 1
        self.selectors = node_selectors
        return {b"id": object()} if self.looks >= self.after else {}


def test_the_registration_wait_looks_often_then_leaves_ray_its_own_call(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray._raylet
    from ray._private import services

    gcs = _Gcs(after=3)
    monkeypatch.setattr(ray._raylet, "GcsClient", gcs)
    monkeypatch.setattr(raystart, "REGISTRATION_POLL_S", 0.0)
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(services, "get_node", lambda address, node: calls.append((address, node)) or {"node": node})
    raystart._prompt_registration()
    node_id = "ab" * 28
    assert services.get_node("127.0.0.1:6379", node_id) == {"node": node_id}
    assert gcs.looks == 3 and gcs.address == "127.0.0.1:6379"
    assert gcs.selectors[0].node_id == bytes.fromhex(node_id)
    assert calls == [("127.0.0.1:6379", node_id)]  # Ray's call still made: it returns the node's info


def test_a_node_that_never_registers_is_left_to_rays_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray._raylet

    monkeypatch.setattr(ray._raylet, "GcsClient", _Gcs(after=10**9))
    monkeypatch.setattr(raystart, "REGISTRATION_POLL_S", 0.0)
    assert raystart._registered("127.0.0.1:6379", "ab" * 28, timeout_s=0.05) is False
