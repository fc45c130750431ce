"""weights_sha256 of a train function's checkpoint: the model's tensors whatever the layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from orchestrator.runtime.loop.func_weights import flatten, folder_weights_sha256, model_part
from orchestrator.runtime.loop.weights import weights_sha256

pytestmark = pytest.mark.unit


def model_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1)).state_dict()


def test_nested_state_flattens_to_dotted_names_and_the_model_part_drops_its_prefix_and_wrappers() -> None:
    t = torch.ones(2)
    flat = dict(flatten({"model": {"module.fc.weight": t}, "optimizer": {"state": {0: {"exp_avg": t}}}, "epoch": 3}))
    assert set(flat) == {"model.module.fc.weight", "optimizer.state.0.exp_avg"}
    assert set(model_part(flat)) == {"fc.weight"}
    # No part names a model: every tensor is the model's.
    assert set(model_part({"0.weight": t, "_orig_mod.1.bias": t})) == {"0.weight", "1.bias"}
    assert set(model_part({"app.model.0.weight": t, "app.optim.state": t})) == {"0.weight"}


def test_the_same_weights_give_one_digest_saved_whole_with_an_optimizer_wrapped_or_as_dcp(tmp_path: Path) -> None:
    state = model_state()
    expected = weights_sha256(state)

    bare = tmp_path / "bare"
    bare.mkdir()
    torch.save(state, bare / "model.pt")

    wrapped = tmp_path / "wrapped"
    wrapped.mkdir()
    ddp = {f"module.{k}": v for k, v in state.items()}
    torch.save({"model": ddp, "optimizer": {"state": {0: {"m": torch.zeros(3)}}}, "epoch": 9}, wrapped / "ckpt.pth")
    (wrapped / "tokenizer.bin").write_bytes(b"not a torch file")
    (wrapped / "epoch.json").write_text("{}")

    sharded = tmp_path / "dcp"
    dcp.save(
        {"app": {"model": dict(state), "optim": {"lr": torch.tensor(0.1)}}}, checkpoint_id=str(sharded), no_dist=True
    )
    (sharded / "epoch.json").write_text("{}")

    assert folder_weights_sha256(str(bare)) == expected
    assert folder_weights_sha256(str(wrapped)) == expected
    assert folder_weights_sha256(str(sharded)) == expected


def test_other_weights_another_digest_and_no_tensor_no_digest(tmp_path: Path) -> None:
    state = model_state()
    state["0.weight"] = state["0.weight"] + 1e-6
    a = tmp_path / "a"
    a.mkdir()
    torch.save(state, a / "model.pt")
    assert folder_weights_sha256(str(a)) != weights_sha256(model_state())
    b = tmp_path / "b"
    b.mkdir()
    (b / "epoch.txt").write_text("3")
    assert folder_weights_sha256(str(b)) is None


def test_the_orchestrator_s_rng_states_never_count_as_weights(tmp_path: Path) -> None:
    state = model_state()
    torch.save(state, tmp_path / "model.pt")
    (tmp_path / ".orchestrator").mkdir()
    torch.save({"torch": torch.get_rng_state()}, tmp_path / ".orchestrator" / "rng-rank0.pt")
    assert folder_weights_sha256(str(tmp_path)) == weights_sha256(state)
