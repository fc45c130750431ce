"""``compose``: a typed Config from the command line's groups and overrides, and the
command line that makes it again (what a run launched from Python is started with).

A run's controller runs in a process of its own, which composes its config from words as
``python -m orchestrator`` does. So each Config composed here keeps the words it came
from; a field changed on it afterwards (``cfg.job.steps = 50``) becomes one more word,
and the words are composed again and checked to give the very same config before
anything launches: a change that cannot be said as a word is refused, never dropped.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

from orchestrator.config.schema import Config
from orchestrator.errors import ConfigError

# What each config composed here was composed from, by the object (a dataclass with
# fields of its own cannot carry them): an entry goes with its config.
_WORDS: dict[int, tuple[weakref.ref[Config], tuple[str, ...]]] = {}


def compose(
    *overrides: str | Iterable[str],
    home: str | os.PathLike[str] | None = None,
    config_dirs: Iterable[str | os.PathLike[str]] = (),
) -> Config:
    """The validated Config that ``python -m orchestrator OVERRIDES`` would run.

    ``overrides``: ``GROUP=OPTION`` and ``KEY=VALUE`` words, given one by one or as lists;
    ``home``: where runs live (the ``home=`` key; default ``ORCHESTRATOR_HOME``, else
    ``~/.orchestrator``); ``config_dirs``: folders of your own config groups, searched
    before the project's (``--config-dir``). A bad word raises ConfigError naming its key."""
    words = _flatten(overrides)
    for word in words:
        if word.startswith("-"):
            raise ConfigError(
                word.split("=", 1)[0],
                "is an option of the command line, not an override; compose takes KEY=VALUE and GROUP=OPTION "
                "words (config_dirs= for --config-dir; a sweep is a loop over compose)",
            )
    if home is not None:
        words.append(f"home={quote(os.path.abspath(os.path.expanduser(os.fspath(home))))}")
    words += [f"--config-dir={os.path.abspath(os.fspath(d))}" for d in config_dirs]
    cfg = compose_words(words)
    _remember(cfg, words)
    return cfg


def compose_words(words: list[str]) -> Config:
    """The config a command line's words compose to, read as ``python -m orchestrator`` reads them."""
    from orchestrator.config.cli import parse_args
    from orchestrator.config.compose import compose as compose_overrides

    return compose_overrides(parse_args(words).overrides)


def command_line(cfg: Config) -> list[str]:
    """The words ``python -m orchestrator`` composes ``cfg`` from: those it was composed
    from, then one ``KEY=VALUE`` for each field changed since. ConfigError when it was not
    made by ``compose`` or a change cannot be given as a word."""
    return composed_again(cfg)[0]


def composed_again(cfg: Config) -> tuple[list[str], Config]:
    """``command_line(cfg)`` and the config those words compose to: equal to ``cfg``,
    and a new object (what a launch checks and changes is not the caller's)."""
    from orchestrator.wire.codec import to_plain

    words = _recalled(cfg)
    first = compose_words(words)
    wanted = to_plain(cfg)
    changed = [f"{key}={value_word(key, value)}" for key, value in changes(to_plain(first), wanted)]
    if not changed:
        return words, first
    again = compose_words([*words, *changed])
    differs = next(changes(to_plain(again), wanted), None)
    if differs is not None:
        raise ConfigError(
            differs[0],
            "was changed after compose to a value the command line cannot give it; "
            "pass it to orchestrator.compose as an override instead",
        )
    return [*words, *changed], again


def _recalled(cfg: Config) -> list[str]:
    entry = _WORDS.get(id(cfg))
    if entry is None or entry[0]() is not cfg:
        raise ConfigError(
            "config",
            "was not made by orchestrator.compose, so no command line is known to make it again; "
            "make it with orchestrator.compose(...)",
        )
    return list(entry[1])


def _remember(cfg: Config, words: list[str]) -> None:
    key = id(cfg)
    _WORDS[key] = (weakref.ref(cfg, lambda _ref: _WORDS.pop(key, None)), tuple(words))


def _flatten(overrides: tuple[str | Iterable[str], ...]) -> list[str]:
    words: list[str] = []
    for item in overrides:
        if isinstance(item, str):
            words.append(item)
            continue
        for word in item:
            if not isinstance(word, str):
                raise ConfigError("overrides", f"got {type(word).__name__} {word!r}; each override is a string")
            words.append(word)
    return words


def changes(base: Any, now: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Each key of ``now`` (a plain config, nested dicts) whose value differs from
    ``base``'s, dotted, with its new value; a mapping compared key by key."""
    if isinstance(base, dict) and isinstance(now, dict):
        for key in now:
            path = f"{prefix}{key}"
            if key not in base:
                yield path, now[key]
            else:
                yield from changes(base[key], now[key], f"{path}.")
        for key in base:
            if key not in now:
                yield f"{prefix}{key}", REMOVED
        return
    if base != now or type(base) is not type(now):
        yield prefix.rstrip("."), now


# A key ``changes`` found in the first config and not in the second.
REMOVED = object()


def value_word(key: str, value: Any) -> str:
    """``value`` as the command line writes it; ConfigError naming ``key`` for a value
    only a config file can hold (a list, a mapping), or a key removed."""
    if value is REMOVED:
        raise ConfigError(key, "was removed after compose; pass ~KEY to orchestrator.compose instead")
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str) and "\\" not in value:
        return quote(value)
    raise ConfigError(
        key,
        f"was changed after compose to {type(value).__name__} {str(value)[:60]!r}; "
        "pass it to orchestrator.compose as an override instead",
    )


def quote(text: str) -> str:
    """``text`` as one quoted value of Hydra's override grammar."""
    return "'" + text.replace("'", "\\'") + "'"
