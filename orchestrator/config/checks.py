"""The small checks every validator of the config uses: names, integers, and their limits."""

from __future__ import annotations

from orchestrator.errors import ConfigError
from orchestrator.wire.codec import show

# Names that become folders, file names and cluster names: a run id is at most
# MAX_RUN_ID characters, and a generated one is the job's name plus 21.
MAX_RUN_ID = 100
MAX_JOB_NAME = 64
MAX_REGION_NAME = 63
NAME_RULE = "letters, digits, '-', '_' and '.', starting with a letter or digit"
# A step count or batch no run reaches (a billion steps at a thousand a second is eleven
# days), so a value beyond is a typo, refused before a cluster starts.
MAX_STEPS = 10**9
MAX_BATCH_SIZE = 2**24


def positive_int(key: str, value: int) -> None:
    if value < 1:
        raise ConfigError(key, f"got {value}; expected an integer >= 1")


def non_negative_int(key: str, value: int) -> None:
    if value < 0:
        raise ConfigError(key, f"got {value}; expected an integer >= 0")


def bounded_int(key: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise ConfigError(key, f"got {show(value)}; expected an integer in {lo}..{hi}")


_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def safe_name(name: str) -> bool:
    """ASCII letters, digits, '-', '_', '.', starting with a letter or digit: no path
    (no '/', no '..'), no option ('-x'), nothing a shell or a cluster name mangles."""
    return bool(name) and name[0].isascii() and name[0].isalnum() and set(name) <= _NAME_CHARS
