"""DistributedDataParallel's options that keep a restored run bitwise on its course.

A collective of more than two ranks sums each element of a gradient bucket in an
order that depends on where the element lies in the bucket's flat buffer (a ring
cuts the buffer into chunks, and each chunk's sum starts at another rank). DDP lays
its buckets out in the parameters' order when it wraps a model and again, in the
order the gradients came, after the wrapper's first step. A run that never stopped
trains every step but its first on the second layout; a run restored into a new
wrapper trains one step more on the first, which moves the last bits of its weights,
and it no longer ends with the uninterrupted run's weights (measured: a digits run of
four workers restored at step 350 diverged within ten steps). With
``find_unused_parameters`` DDP never lays its buckets out again: every step of every
run sums in the same order. Two ranks need nothing: a + b is b + a.

What it costs: DDP walks the autograd graph once per step, to find parameters the
forward pass did not use (it finds none in most models, and says so once per rank in
its log), and its buckets keep the parameters' order rather than the one the
gradients come in, which overlaps less of the all-reduce with the backward pass.
``benchmarks/ddp_options.py``, four CPU ranks on two cores: 0.87 of the steps per
second for an MLP of 3M parameters, 0.68 for one of 30k (the walk is per step, the
same for a small model as for a large one). One bucket per parameter, the other way to
one layout, cost more (0.63 and 0.21).
"""

from __future__ import annotations

from typing import Any


def ddp_options(world: int) -> dict[str, Any]:
    """The keyword arguments of DistributedDataParallel for a world of ``world`` ranks."""
    return {"find_unused_parameters": True} if world > 2 else {}
