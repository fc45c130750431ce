"""Population-based training's decisions as plain data: explore, and the exploit record.

At every ``hpo.perturbation_interval`` iterations a trial in the bottom
``hpo.quantile_fraction`` of the population (by its newest result) takes the newest
checkpoint of a trial in the top fraction (exploit) and goes on with that trial's
values perturbed (explore). Each decision is an ``Exploit`` record: journaled, kept in
the search's snapshot and in result.json, so a resumed search continues the same
population (each trial's values and the checkpoint lineage as they were).

Explore is a pure function of the donor's values and a seed made from the run's seed,
the trial and the iteration: each key is drawn afresh from its distribution with
``RESAMPLE_PROBABILITY``, else moved: a number times 0.8 or 1.2 within its range (and
to its q, an integer for an integer key), a choice to a neighbouring value. So an
explored value is always one of the search space's.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.hpo.space import QUANTIZED, Distribution, Value, draw, in_space, parse_distribution, quantize

RESAMPLE_PROBABILITY = 0.25
FACTORS = (0.8, 1.2)


def decision_rng(seed: int, trial_id: str, iteration: int) -> random.Random:
    """The randomness of one decision: the same for the same trial at the same iteration."""
    digest = hashlib.sha256(f"{seed}/{trial_id}/{iteration}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def mutable_keys(space: dict[str, str], mutate: list[str]) -> list[str]:
    """The keys PBT perturbs: ``mutate`` (hpo.mutate) as given, or else every key whose values
    are not integers. An integer key (a width, a layer count, a batch size) shapes the model
    or the data a checkpoint was made with: the taker keeps its donor's."""
    if mutate:
        return [k for k in space if k in mutate]
    out = []
    for key, text in space.items():
        kind, args = parse_distribution(key, text)
        integers = kind == Distribution.randint or all(isinstance(a, int) for a in args)
        if not integers:
            out.append(key)
    return out


def explore(
    space: dict[str, str], values: dict[str, Any], rng: random.Random, mutable: list[str] | None = None
) -> dict[str, Value]:
    """``values`` (a donor's) perturbed, each of ``mutable`` (default: every key) within its
    distribution; the other keys as the donor has them."""
    out: dict[str, Value] = {}
    for key, text in space.items():
        kind, args = parse_distribution(key, text)
        value = values[key]
        if mutable is not None and key not in mutable:
            out[key] = value
        elif rng.random() < RESAMPLE_PROBABILITY:
            out[key] = rng.choice(args) if kind == Distribution.grid else draw(kind, args, rng)
        elif kind in (Distribution.choice, Distribution.grid):
            i = args.index(value) if value in args else 0
            out[key] = args[min(max(i + rng.choice((-1, 1)), 0), len(args) - 1)]
        else:
            moved = min(max(float(value) * rng.choice(FACTORS), float(args[0])), float(args[1]))
            if kind in QUANTIZED:
                out[key] = quantize(moved, *args)
            elif kind == Distribution.randint:
                out[key] = min(max(round(moved), int(args[0])), int(args[1]) - 1)
            else:
                out[key] = moved
    return out


@dataclass(frozen=True)
class Exploit:
    """Trial ``trial_id`` took ``donor_id``'s checkpoint at the donor's iteration
    ``donor_iteration`` (its own at ``iteration``) and goes on with ``values``."""

    trial_id: str
    donor_id: str
    iteration: int
    donor_iteration: int
    values: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


EXPLOIT_KEYS = frozenset(Exploit("a", "b", 0, 0, {}).to_json())


def read_exploits(raw: Any, space: dict[str, str], trial_ids: set[str], max_t: int) -> list[Exploit]:
    """A snapshot's decisions, checked: known trials, iterations in range, values of the
    space. ValueError (one line) for anything else."""
    if not isinstance(raw, list) or len(raw) > 100_000:
        raise ValueError("pbt: the exploit decisions are not a list")
    out: list[Exploit] = []
    for i, item in enumerate(raw):
        where = f"pbt decision {i}"
        if not isinstance(item, dict) or set(item) != EXPLOIT_KEYS:
            raise ValueError(f"{where} is not an exploit record ({', '.join(sorted(EXPLOIT_KEYS))})")
        pair = (item["trial_id"], item["donor_id"])
        if not all(isinstance(t, str) and t in trial_ids for t in pair) or pair[0] == pair[1]:
            raise ValueError(f"{where} names trials the snapshot does not have")
        for name in ("iteration", "donor_iteration"):
            value = item[name]
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= max_t:
                raise ValueError(f"{where}.{name} is not an iteration in [1, {max_t}]")
        values = item["values"]
        if not isinstance(values, dict) or set(values) != set(space):
            raise ValueError(f"{where}.values are not the search space's keys")
        for key, value in values.items():
            if not in_space(*parse_distribution(key, space[key]), value):
                raise ValueError(f"{where}.values.{key} is not a value of its distribution")
        out.append(Exploit(**item))
    return out
