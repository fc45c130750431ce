"""A search space: config paths, each with a distribution, and the trials drawn from it.

``hpo.search_space`` names any key of the job's config a trial may vary by its path
(``job.params.hidden``, ``job.lr``, ``trainer.grad_clip_norm``, ``data.samples``); a
nested mapping, as Hydra's dotted overrides build it, is read as paths
(``flatten_space``). The short keys ``lr``, ``hidden_size`` and ``batch_size`` mean
``job.<key>``. A trial's record names its values by the keys as the user wrote them.

Each value is ``"<distribution> <numbers...>"``: ``choice``/``grid`` (the values),
``uniform``/``loguniform``/``randint`` (low high), ``quniform``/``qloguniform``
(low high q: a multiple of q within [low, high]; an integer when all three are).
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from orchestrator.errors import ConfigError
from recovery.boundedjson import INT64


class Distribution(StrEnum):
    choice = "choice"
    grid = "grid"
    uniform = "uniform"
    quniform = "quniform"
    loguniform = "loguniform"
    qloguniform = "qloguniform"
    randint = "randint"


HPO_DISTRIBUTIONS = tuple(Distribution)
RANGES = (Distribution.uniform, Distribution.loguniform, Distribution.randint)
QUANTIZED = (Distribution.quniform, Distribution.qloguniform)
LOG = (Distribution.loguniform, Distribution.qloguniform)
# The config sections a trial may vary, and the short keys that predate paths.
ROOTS = ("job", "trainer", "data")
SHORT_KEYS = {"lr": "job.lr", "hidden_size": "job.hidden_size", "batch_size": "job.batch_size"}
# A search's trials are listed up front (sample_configs); more than this is a typo.
MAX_TRIALS = 10_000
MAX_KEYS = 64
MAX_DEPTH = 8
MAX_VALUES = 1_000
# A quantized range has at most this many multiples of q on either side of 0: beyond, a
# double no longer holds each multiple (and value / q overflows long before 1e308).
MAX_MULTIPLES = 2**53
# A number as a spec writes it: ASCII digits, an optional sign, fraction and exponent
# ('1_000' too, as the command line's numbers).
_NUMBER = re.compile(r"[+-]?(?:[0-9][0-9_]*(?:\.(?:[0-9][0-9_]*)?)?|\.[0-9][0-9_]*)(?:[eE][+-]?[0-9]+)?")

Value = int | float


def where(key: str) -> str:
    return f"hpo.search_space.{key}"


def flatten_space(raw: Mapping[str, Any]) -> dict[str, str]:
    """``{"job": {"params": {"hidden": "choice 32 64"}}, "lr": ...}`` -> ``{"job.params.hidden": ..., "lr": ...}``;
    a flat mapping (a saved config's) comes back as it is."""
    out: dict[str, str] = {}

    def walk(node: Mapping[str, Any], prefix: str, depth: int) -> None:
        for name, value in node.items():
            key = f"{prefix}{name}"
            if isinstance(value, Mapping):
                if depth >= MAX_DEPTH:
                    raise ConfigError(where(key), f"nests deeper than {MAX_DEPTH} levels; give a config path")
                walk(value, f"{key}.", depth + 1)
            elif isinstance(value, str):
                out[key] = value
            else:
                raise ConfigError(
                    where(key), f"got {str(value)[:80]!r}; expected a distribution and its numbers, e.g. 'choice 32 64'"
                )
            if len(out) > MAX_KEYS:
                raise ConfigError("hpo.search_space", f"has more than {MAX_KEYS} keys")

    walk(raw, "", 0)
    return out


def config_path(key: str) -> str:
    """The config path a search-space key names: ``lr`` -> ``job.lr``; ``trainer.x`` as it is."""
    if key in SHORT_KEYS:
        return SHORT_KEYS[key]
    parts = key.split(".")
    if len(parts) < 2 or parts[0] not in ROOTS or not all(parts):
        raise ConfigError(
            where(key),
            "not a config path a trial can vary; expected job.<key>, job.params.<key>, trainer.<key> or "
            f"data.<key> (or one of {', '.join(SHORT_KEYS)})",
        )
    return key


def parse_distribution(key: str, text: str) -> tuple[Distribution, list[Value]]:
    """``"loguniform 0.01 0.2"`` -> ("loguniform", [0.01, 0.2]); ConfigError naming the key."""
    parts = str(text).split()
    if not parts or parts[0] not in HPO_DISTRIBUTIONS:
        raise ConfigError(
            where(key),
            f"got {str(text)[:80]!r}; expected a distribution and its numbers, one of: "
            + ", ".join(HPO_DISTRIBUTIONS)
            + " (e.g. 'loguniform 0.01 0.2', 'choice 32 64 128')",
        )
    kind, args = Distribution(parts[0]), []
    if len(parts) > MAX_VALUES + 1:
        raise ConfigError(where(key), f"lists more than {MAX_VALUES} values")
    for raw in parts[1:]:
        args.append(number(key, raw, text))
    if not args:
        raise ConfigError(where(key), f"got {shown(text)}; {kind} needs numbers after it")
    if kind in RANGES or kind in QUANTIZED:
        want = 3 if kind in QUANTIZED else 2
        if len(args) != want or not args[0] < args[1]:
            shape = "low, high and q" if want == 3 else "two numbers"
            raise ConfigError(where(key), f"got {shown(text)}; {kind} takes {shape}, low < high")
        if kind in LOG and args[0] <= 0:
            raise ConfigError(where(key), f"got {shown(text)}; {kind} needs low > 0")
        if not math.isfinite(args[1] - args[0]):
            # A draw is low + (high - low) * u: it would overflow to inf.
            raise ConfigError(where(key), f"got {shown(text)}; high - low must be a finite number (about 1.8e308)")
        if kind in QUANTIZED and not 0 < args[2] <= args[1] - args[0]:
            raise ConfigError(where(key), f"got {shown(text)}; q must be > 0 and at most high - low")
        if kind in QUANTIZED and max(abs(args[0]), abs(args[1])) / args[2] > MAX_MULTIPLES:
            raise ConfigError(
                where(key), f"got {shown(text)}; q is too small for the range: |low| and |high| at most 2**53 x q"
            )
        if kind == Distribution.randint and not all(isinstance(a, int) for a in args):
            raise ConfigError(where(key), f"got {shown(text)}; randint takes integers")
    return kind, args


def number(key: str, raw: str, text: str) -> Value:
    """One number of a spec: an int within int64 (a trial's value is a JSON int everywhere it
    goes), or a finite float; ConfigError naming the key otherwise."""
    if _NUMBER.fullmatch(raw) is None:
        raise ConfigError(
            where(key), f"got {shown(raw)} in {shown(text)}; expected finite numbers, e.g. 32, 0.01 or 1e-3"
        )
    plain = raw.replace("_", "")
    if not any(c in plain for c in ".eE"):
        # Counted before int(): Python refuses a str of more than 4300 digits.
        if len(plain.lstrip("+-").lstrip("0")) > 19 or not INT64[0] <= int(plain) <= INT64[1]:
            raise ConfigError(
                where(key),
                f"got {shown(raw)} in {shown(text)}; an integer beyond int64 (|x| < 2**63): no trial takes it",
            )
        return int(plain)
    value = float(plain)
    if not math.isfinite(value):
        raise ConfigError(
            where(key), f"got {shown(raw)} in {shown(text)}; expected finite numbers (about 1.8e308 at most)"
        )
    mantissa = re.split("[eE]", plain)[0]
    if value == 0 and any(c in "123456789" for c in mantissa):
        raise ConfigError(where(key), f"got {shown(raw)} in {shown(text)}; too small for a double (it would be 0)")
    return value


def shown(text: str, limit: int = 60) -> str:
    """A spec, or a word of one, for a one-line message: quoted and cut to ``limit``."""
    quoted = repr(str(text))
    return quoted if len(quoted) <= limit else f"{quoted[: limit - 5]}...{quoted[-2:]} ({len(str(text))} characters)"


def validate_search_space(space: dict[str, str]) -> None:
    """Each key a config path a trial may vary (no two naming the same path), each value a
    distribution (see parse_distribution). Whether the values suit the keys is checked per
    trial, as a run's config is (orchestrator.config.validate_search)."""
    if not space:
        raise ConfigError("hpo.search_space", "is empty; give e.g. hpo.search_space.job.lr='loguniform 0.01 0.2'")
    seen: dict[str, str] = {}
    for key, text in space.items():
        path = config_path(key)
        if path in seen:
            raise ConfigError(where(key), f"names {path}, as hpo.search_space.{seen[path]} does; keep one of them")
        seen[path] = key
        parse_distribution(key, text)


def trial_count(space: dict[str, str], num_samples: int) -> int:
    """How many trials a search runs: num_samples times every combination of its grid keys."""
    n = num_samples
    for key, text in space.items():
        kind, args = parse_distribution(key, text)
        if kind == Distribution.grid:
            n *= len(args)
    return n


def quantize(value: float, low: Value, high: Value, q: Value) -> Value:
    """``value`` rounded to a multiple of ``q`` within [low, high]; an int when all three are."""
    out = round(value / q) * q
    if out > high:
        out -= q
    if out < low:
        out += q
    if all(isinstance(x, int) for x in (low, high, q)):
        return round(out)
    return float(out)


def draw(kind: Distribution, args: list[Value], rng: random.Random) -> Value:
    """One value of a non-grid distribution."""
    if kind == Distribution.choice:
        return rng.choice(args)
    if kind == Distribution.uniform:
        return rng.uniform(float(args[0]), float(args[1]))
    if kind == Distribution.loguniform:
        return math.exp(rng.uniform(math.log(args[0]), math.log(args[1])))
    if kind == Distribution.quniform:
        return quantize(rng.uniform(float(args[0]), float(args[1])), *args)
    if kind == Distribution.qloguniform:
        return quantize(math.exp(rng.uniform(math.log(args[0]), math.log(args[1]))), *args)
    return rng.randrange(int(args[0]), int(args[1]))  # randint: high excluded, as Tune's


def sample_configs(space: dict[str, str], num_samples: int, seed: int) -> list[dict[str, Value]]:
    """Every trial's values, drawn once from ``seed``: each of ``num_samples`` rounds takes every
    combination of the grid keys (in order) and draws the other keys afresh, as Tune's
    variant generator does. Listing them up front, rather than letting Tune draw them as
    it goes, is what makes a trial the same trial in every attempt: a resumed search
    rebuilds the list from the run's config and never reads it back from a store."""
    rng = random.Random(seed)
    parsed = {key: parse_distribution(key, text) for key, text in space.items()}
    grids = {key: args for key, (kind, args) in parsed.items() if kind == Distribution.grid}
    out: list[dict[str, Value]] = []
    for _ in range(num_samples):
        for combo in itertools.product(*grids.values()):
            fixed = dict(zip(grids, combo, strict=True))
            out.append(
                {key: fixed[key] if key in fixed else draw(kind, args, rng) for key, (kind, args) in parsed.items()}
            )
    return out


def in_space(kind: Distribution, args: list[Value], value: Any) -> bool:
    """Whether ``value`` is one this distribution can give (a snapshot's record of a trial
    a searcher proposed is checked so)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    if kind in (Distribution.choice, Distribution.grid):
        return value in args
    if kind == Distribution.randint:
        return isinstance(value, int) and args[0] <= value < args[1]
    return args[0] <= value <= args[1]


def edge_values(space: dict[str, str]) -> dict[str, list[Value]]:
    """The values at the edges of each key, for a searcher that proposes its own trials:
    every choice, both ends of a range (randint's top is high - 1, a quantized range's
    the multiples of q nearest its ends)."""
    out: dict[str, list[Value]] = {}
    for key, text in space.items():
        kind, args = parse_distribution(key, text)
        if kind in (Distribution.choice, Distribution.grid):
            out[key] = list(dict.fromkeys(args))
        elif kind == Distribution.randint:
            out[key] = [args[0], args[1] - 1]
        elif kind in QUANTIZED:
            out[key] = [quantize(float(args[0]), *args), quantize(float(args[1]), *args)]
        else:
            out[key] = [float(args[0]), float(args[1])]
    return out


def apply_values(plain: dict[str, Any], values: Mapping[str, Value]) -> dict[str, Any]:
    """A copy of the plain config sections ``plain`` ({"job": ..., "trainer": ..., "data": ...})
    with each search key's value set at its path; the sections not named stay shared."""
    out = dict(plain)
    for key, value in values.items():
        parts = config_path(key).split(".")
        node = out
        for name in parts[:-1]:
            child = node.get(name)
            # Copied on the way down: the caller's sections are never changed.
            node[name] = node = dict(child) if isinstance(child, dict) else {}
        node[parts[-1]] = value
    return out
