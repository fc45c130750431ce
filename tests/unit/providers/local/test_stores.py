from __future__ import annotations

import json

import pytest

from orchestrator.config.schema import RegionConfig
from providers.local.stores import read_ports, wanted

pytestmark = pytest.mark.unit


def regions() -> dict[str, RegionConfig]:
    return {
        "a": RegionConfig(store="s3://orch-a/stores", storage_options={"endpoint_url": ""}),
        "b": RegionConfig(store="s3://orch-b/x", storage_options={"endpoint_url": "http://127.0.0.1:9"}),
        "c": RegionConfig(store="gs://orch-c/stores"),
        "d": RegionConfig(store="/tmp/local-store"),
    }


def test_a_server_for_each_object_store_without_an_endpoint() -> None:
    got = [(w.region, w.kind, w.bucket, w.port) for w in wanted(regions())]
    assert got == [("a", "s3", "orch-a", 0), ("c", "gs", "orch-c", 0)]


def test_a_resumed_run_restarts_its_own_servers_on_their_ports() -> None:
    got = [(w.region, w.port) for w in wanted(regions(), {"a": 4001, "b": 4002})]
    assert got == [("a", 4001), ("b", 4002), ("c", 0)]


def test_ports_file_read_defensively(tmp_path) -> None:
    path = tmp_path / "local_stores.json"
    assert read_ports(path) == {}
    path.write_text("not json")
    assert read_ports(path) == {}
    path.write_text(json.dumps({"ports": {"a": 4001, "b": "x"}, "pids": [1]}))
    assert read_ports(path) == {"a": 4001}
