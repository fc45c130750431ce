"""The command line's words, bounded before Hydra parses one: their number and length, how
deep their brackets nest, the numbers in them (within int64, a double's range and
MAX_NUMBER_DIGITS significant digits), the values a range() gives and the faults a
chaos.faults list holds. Each refusal is one ConfigError naming the key and the limit.

Pure text: Hydra's parser recurses once per bracket, Python refuses an integer of more
than 4300 digits, and Hydra's shuffle() lists a range before anything could count it.
"""

from __future__ import annotations

import math
import re

from orchestrator.config.checks import (
    MAX_COMMAND_CHARS,
    MAX_FAULTS,
    MAX_NESTING,
    MAX_NUMBER_DIGITS,
    MAX_RANGE_VALUES,
    MAX_WORD_CHARS,
    MAX_WORDS,
)
from orchestrator.errors import ConfigError
from orchestrator.wire.codec import show
from recovery.boundedjson import INT64

_OPEN = "[{("
_CLOSE = "]})"
# Hydra's numbers: an int ('1_000' too) or a float ('1.5', '.5', '1e-3'); inf and nan are
# validate's (check_bounds) to refuse by key.
_NUMBER = re.compile(r"[+-]?(?P<int>[0-9][0-9_]*)?(?:\.(?P<frac>[0-9][0-9_]*)?)?(?:[eE](?P<exp>[+-]?[0-9]+))?")
_SPLIT = re.compile(r"[\s\[\]{}(),:=]+")
_RANGE = re.compile(r"(?<![A-Za-z0-9_])range\s*\(")
_RANGE_ARG = re.compile(r"\s*(?:(?:start|stop|step)\s*=\s*)?([^=]*?)\s*")
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", re.DOTALL)
FAULTS_KEY = "chaos.faults"


def refuse_unbounded(words: list[str]) -> None:
    """ConfigError for the first word (or the whole command line) beyond a bound."""
    if len(words) > MAX_WORDS:
        raise ConfigError("command line", f"has {len(words)} words; at most {MAX_WORDS}: give fewer overrides")
    total = sum(len(w) for w in words)
    if total > MAX_COMMAND_CHARS:
        raise ConfigError(
            "command line",
            f"is {total} characters long; at most {MAX_COMMAND_CHARS}: put the config in a file (--config-dir DIR)",
        )
    for word in words:
        refuse_unbounded_word(word)


def refuse_unbounded_word(word: str) -> None:
    key, sep, value = word.partition("=")
    name = shown_key(key)
    if len(word) > MAX_WORD_CHARS:
        raise ConfigError(
            name, f"is {len(word)} characters long; at most {MAX_WORD_CHARS} a word: put it in a file (--config-dir)"
        )
    if not sep:
        return
    depth = nesting(value)
    if depth > MAX_NESTING:
        raise ConfigError(name, f"nests {depth} brackets deep; at most {MAX_NESTING}")
    bare = _QUOTED.sub(" ", value)
    for token in _SPLIT.split(bare):
        why = number_problem(token)
        if why is not None:
            raise ConfigError(name, f"got {show(token)}: {why}; quote it for a string: {name}='...'")
    _refuse_long_ranges(name, bare)
    if name == FAULTS_KEY:
        count = top_items(bare)
        if count > MAX_FAULTS:
            raise ConfigError(name, f"lists {count} faults; at most {MAX_FAULTS} in one drill")


def shown_key(key: str) -> str:
    """The key as a message names it: without Hydra's +/~ and cut to a readable length."""
    plain = key.lstrip("+~")
    return plain if len(plain) <= 60 and plain.isprintable() else show(plain)[1:-1]


def nesting(text: str) -> int:
    """The deepest nesting of brackets, braces and parentheses, quoted or not (an
    interpolation inside a quoted string is parsed too)."""
    depth = deepest = 0
    for c in text:
        if c in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif c in _CLOSE and depth:
            depth -= 1
    return deepest


def number_problem(token: str) -> str | None:
    """Why a number the command line gives is refused (None: no number, or one in bounds)."""
    m = _NUMBER.fullmatch(token)
    if m is None or not (m["int"] or m["frac"]):
        return None
    whole, frac, exp = (m["int"] or "").replace("_", ""), (m["frac"] or "").replace("_", ""), m["exp"]
    if frac == "" and exp is None and "." not in token:
        if len(whole.lstrip("0")) > 19 or not INT64[0] <= int(token.replace("_", "")) <= INT64[1]:
            return "an integer beyond int64 (|x| < 2**63)"
        return None
    significant = (whole + frac).lstrip("0").rstrip("0")
    if len(significant) > MAX_NUMBER_DIGITS:
        return f"{len(significant)} significant digits; at most {MAX_NUMBER_DIGITS}"
    if exp is not None and len(exp.lstrip("+-").lstrip("0")) > 4:
        return "an exponent beyond a double's range"
    value = float(token.replace("_", ""))
    if not math.isfinite(value):
        return "beyond a double's range (about 1.8e308)"
    if value == 0 and significant:
        return "too small for a double (it would be 0)"
    return None


def top_items(text: str) -> int:
    """The items of a top-level list (its commas at depth one, plus one; 0 when empty)."""
    text = text.strip()
    if not text.startswith("[") or text[1:].strip().startswith("]"):
        return 0
    depth, items = 0, 1
    for c in text:
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth == 1:
            items += 1
    return items


def _refuse_long_ranges(name: str, bare: str) -> None:
    """Each range(start, stop[, step]) of plain numbers gives at most MAX_RANGE_VALUES values."""
    for m in _RANGE.finditer(bare):
        close = bare.find(")", m.end())
        inner = bare[m.end() : close if close >= 0 else len(bare)]
        count = range_length(inner)
        if count is None:
            raise ConfigError(name, "range() takes plain numbers here: range(start,stop) or range(start,stop,step)")
        if count > MAX_RANGE_VALUES:
            raise ConfigError(name, f"range({inner.strip()}) gives {count:.0f} values; at most {MAX_RANGE_VALUES}")


def range_length(inner: str) -> float | None:
    """How many values range(<inner>) gives, as Hydra counts them; None if its arguments
    are not plain numbers."""
    args: list[float] = []
    for part in inner.split(","):
        m = _RANGE_ARG.fullmatch(part)
        try:
            args.append(float(m[1].replace("_", "")) if m else math.nan)
        except ValueError:
            return None
    if not 1 <= len(args) <= 3 or not all(math.isfinite(a) for a in args):
        return None
    if len(args) == 1:
        args = [0.0, *args]
    start, stop, step = args[0], args[1], args[2] if len(args) == 3 else 1.0
    if step == 0:
        return None
    return max(0.0, math.ceil((stop - start) / step))
