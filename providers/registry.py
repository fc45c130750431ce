"""Providers by the name ``cloud.provider`` uses."""

from __future__ import annotations

from collections.abc import Callable

from providers.base import Provider


def _local() -> Provider:
    from providers.local import LocalProvider

    return LocalProvider()


PROVIDERS: dict[str, Callable[[], Provider]] = {"local": _local}


class UnknownProvider(KeyError):
    pass


def get_provider(name: str) -> Provider:
    try:
        factory = PROVIDERS[name]
    except KeyError:
        raise UnknownProvider(f"cloud.provider: got {name!r}; known providers: {', '.join(PROVIDERS)}") from None
    return factory()
