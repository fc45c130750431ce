"""DDP's options keep a model wrapped anew mid-run on the course of one never wrapped
again: forked ranks of a real gloo process group on 127.0.0.1, the digits MLP.

A restore wraps the model in a new DistributedDataParallel; beyond two ranks the sum of
a gradient depends on the wrapper's bucket layout (orchestrator/runtime/loop/ddp.py)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
import torch
from torch import nn

from orchestrator.runtime.loop.ddp import ddp_options
from tests.support.runs import run_forked_ranks

pytestmark = pytest.mark.integration

STEPS = 24


def _batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(step * 1000 + rank)
    return torch.randn(32, 64, generator=gen), torch.randint(0, 10, (32,), generator=gen)


def _rank_main(root: str, tag: str, rank: int, world: int, rewrap_at: int | None) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{root}/pg-{tag}", rank=rank, world_size=world)
    try:

        def build(state: bytes | None) -> tuple[nn.Module, nn.Module, torch.optim.Optimizer]:
            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            if state is not None:
                saved = torch.load(io.BytesIO(state), weights_only=True)
                model.load_state_dict(saved["model"])
                opt.load_state_dict(saved["optimizer"])
            return model, nn.parallel.DistributedDataParallel(model, **ddp_options(world)), opt

        model, ddp, opt = build(None)
        for step in range(1, STEPS + 1):
            if step == rewrap_at:
                # What a restore does: the state through bytes, a new model, optimizer and wrapper.
                buf = io.BytesIO()
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, buf)
                del ddp
                model, ddp, opt = build(buf.getvalue())
            x, y = _batch(step, rank)
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
        digest = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in model.state_dict().values()))
        Path(root, f"{tag}-rank{rank}").write_text(digest.hexdigest())
    finally:
        dist.destroy_process_group()


def _weights(tmp_path: Path, world: int, rewrap_at: int | None) -> str:
    tag = f"w{world}-{rewrap_at}"
    args = [(str(tmp_path), tag, r, world, rewrap_at) for r in range(world)]
    assert run_forked_ranks(_rank_main, args, 120) == [0] * world
    digests = {(tmp_path / f"{tag}-rank{r}").read_text() for r in range(world)}
    assert len(digests) == 1, "the ranks' models differ"
    return digests.pop()


@pytest.mark.parametrize("world", [4, 2])
def test_a_model_wrapped_anew_mid_run_ends_with_the_weights_of_one_never_wrapped_again(
    tmp_path: Path, world: int
) -> None:
    never = _weights(tmp_path, world, None)
    # After the wrapper's first step (the one DDP lays its buckets out again after), and later.
    assert _weights(tmp_path, world, 2) == never
    assert _weights(tmp_path, world, 13) == never
