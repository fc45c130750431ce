"""Ray Train's torch config with the process group's store bound to the master's address."""

from __future__ import annotations

import socket

import pytest

pytestmark = pytest.mark.unit


def test_address_family_of_a_node_address() -> None:
    from orchestrator.runtime.group.process_group import address_family

    assert address_family("127.0.0.1") is socket.AF_INET
    assert address_family("10.0.0.7") is socket.AF_INET
    assert address_family("::1") is socket.AF_INET6
    assert address_family("fd00::2") is socket.AF_INET6


def test_the_pinned_ray_binds_the_store_for_gloo_and_nccl_only() -> None:
    # A Ray upgrade that moves what the bound store builds on falls back to Ray's own
    # TorchConfig (the store on every address): this says so here.
    from ray.train.torch import TorchConfig

    from orchestrator.runtime.group.process_group import BOUND, BoundStoreBackend, torch_config

    assert BOUND
    for backend in ("gloo", "nccl"):
        config = torch_config(backend)
        assert config.backend == backend and config.init_method == "env"
        assert config.backend_cls is BoundStoreBackend
    assert type(torch_config("hccl")) is TorchConfig
