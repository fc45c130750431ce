"""The small checks every validator of the config uses: names, integers, and their limits."""

from __future__ import annotations

import math

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
# The built-ins' hidden layer: a million units is already a quarter of a billion weights on
# the synthetic data's 256 features; more is a typo (a search's randint bound, say).
MAX_HIDDEN_SIZE = 2**20


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


# Seconds: every duration, timeout and interval is at least MIN_SECONDS (a heartbeat every
# 1e-300 s launches and then fails) and at most MAX_SECONDS (a sleep that long overflows,
# and no run waits a season for anything).
MIN_SECONDS = 0.01
MAX_SECONDS = 10**7
# CPUs and GPUs a worker or a trial asks Ray for: a hundredth of one at least.
MIN_CPUS = 0.01
MIN_GPUS = 0.01


def seconds(key: str, value: float, off: bool = False) -> None:
    """A duration in MIN_SECONDS..MAX_SECONDS; with ``off``, 0 too (the key's "never")."""
    if off and value == 0:
        return
    if not MIN_SECONDS <= value <= MAX_SECONDS:
        zero = "0 (off) or " if off else ""
        raise ConfigError(key, f"got {show(value)}; expected {zero}seconds > 0, in {MIN_SECONDS:g}..{MAX_SECONDS:g}")


def at_least(key: str, value: float, least: float, what: str, off: bool = False) -> None:
    """A resource amount (CPUs, GPUs, kbps, ms): at least ``least``, or with ``off`` 0 too."""
    if off and value == 0:
        return
    if not (math.isfinite(value) and value >= least):
        zero = "0 or " if off else ""
        raise ConfigError(key, f"got {show(value)}; expected {zero}at least {least:g} {what}")


def local_path(key: str, value: str, what: str) -> None:
    """A folder on this machine: no fsspec chaining ('::'), no URL, no NUL."""
    if "::" in value:
        raise ConfigError(
            key, f"got {show(value)}; '::' chains filesystems (fsspec), which {what} does not take: give a plain path"
        )
    if "://" in value:
        raise ConfigError(key, f"got {show(value)}; {what} is a folder on this machine, not a URL: give a plain path")
    if "\x00" in value:
        raise ConfigError(key, f"got {show(value)}; a path cannot hold a NUL character")


# The command line, bounded before Hydra parses a word of it: Hydra's parser recurses once
# per bracket (a few thousand '[' are a RecursionError after seconds) and reads a few
# dozen kilobytes a second, and Python refuses an integer of more than 4300 digits.
MAX_WORDS = 512
MAX_WORD_CHARS = 8192
MAX_COMMAND_CHARS = 32768
MAX_NESTING = 32
# Significant digits of a number: a double holds 17; more is a paste gone wrong.
MAX_NUMBER_DIGITS = 20
# A sweep (-m): the values one range() gives, and the runs of the whole sweep (one after
# another, each a training run of its own).
MAX_RANGE_VALUES = 1000
MAX_SWEEP_RUNS = 1000
# chaos.faults: a drill of more faults than this is no drill anyone can read.
MAX_FAULTS = 100
