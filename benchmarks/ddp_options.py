"""What DDP's options for an exact restore cost (orchestrator/runtime/loop/ddp.py): training
steps per second of the same DDP loop with the options the training loop gives a world
of ``--world`` ranks and without them, on forked gloo ranks of this machine.

Beyond two ranks the loop wraps the model with ``find_unused_parameters=True``, which keeps
DDP on its first bucket layout (a restore then ends bitwise on the uninterrupted run's
course) at the price of one walk of the autograd graph per step. For each ``--hidden``
size of a five-layer MLP, two rounds of each arm, alternated; prints
``steps_ratio_exact_vs_default`` (with / without, the median of the rounds; 1.0: free).

    python benchmarks/ddp_options.py [--world 4] [--hidden 128,1024] [--steps 300] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import write_json
from orchestrator.runtime.loop.ddp import ddp_options
from tests.support.runs import run_forked_ranks

WARMUP = 20


def _rank(root: str, tag: str, rank: int, world: int, hidden: int, steps: int, exact: bool) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{root}/pg-{tag}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        h = hidden
        layers = [nn.Linear(64, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU()]
        model = nn.Sequential(*layers, nn.Linear(h, 10))
        ddp = nn.parallel.DistributedDataParallel(model, **(ddp_options(world) if exact else {}))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
        t0 = 0.0
        for step in range(WARMUP + steps):
            if step == WARMUP:
                dist.barrier()
                t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()
        dist.barrier()
        if rank == 0:
            Path(root, tag).write_text(str(steps / (time.perf_counter() - t0)))
    finally:
        dist.destroy_process_group()


def rate(root: str, tag: str, world: int, hidden: int, steps: int, exact: bool) -> float:
    args = [(root, tag, r, world, hidden, steps, exact) for r in range(world)]
    if run_forked_ranks(_rank, args, 600) != [0] * world:
        raise SystemExit(f"a rank of {tag} failed")
    return float(Path(root, tag).read_text())


def figures(world: int, rates: dict[int, dict[bool, list[float]]]) -> dict[str, Any]:
    """The flat figures from each hidden size's rounds (steps/s without the options, False,
    and with them, True): the medians and their ratio per size; the unprefixed ratio is
    the last size's. Pure."""
    out: dict[str, Any] = {"world": world}
    for hidden, by_arm in rates.items():
        default, exact = statistics.median(by_arm[False]), statistics.median(by_arm[True])
        ratio = round(exact / default, 3)
        out[f"h{hidden}_steps_per_s_default"] = round(default, 1)
        out[f"h{hidden}_steps_per_s_exact"] = round(exact, 1)
        out[f"h{hidden}_steps_ratio_exact_vs_default"] = ratio
        out["steps_ratio_exact_vs_default"] = ratio
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--hidden", default="128,1024", help="hidden sizes, comma-separated")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()
    if not ddp_options(args.world):
        raise SystemExit(f"a world of {args.world} needs no options: nothing to compare")
    rates: dict[int, dict[bool, list[float]]] = {}
    with tempfile.TemporaryDirectory() as root:
        for hidden in (int(h) for h in args.hidden.split(",")):
            rates[hidden] = {False: [], True: []}
            for i in range(args.rounds):
                for exact in (False, True):
                    tag = f"h{hidden}-{int(exact)}-{i}"
                    rates[hidden][exact].append(rate(root, tag, args.world, hidden, args.steps, exact))
            fig = figures(args.world, {hidden: rates[hidden]})
            print(
                f"hidden {hidden}: {fig[f'h{hidden}_steps_per_s_default']} steps/s without, "
                f"{fig[f'h{hidden}_steps_per_s_exact']} with: ratio {fig['steps_ratio_exact_vs_default']}",
                flush=True,
            )
    write_json(args.json, figures(args.world, rates))


if __name__ == "__main__":
    main()
