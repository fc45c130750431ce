"""Providers by the name ``cloud.provider`` uses."""

from __future__ import annotations

from collections.abc import Callable

from providers.base import Provider


def _local(home: str | None) -> Provider:
    import os

    from providers.local import LocalProvider

    return LocalProvider(state_dir=os.path.join(home, "clusters") if home else None)


PROVIDERS: dict[str, Callable[[str | None], Provider]] = {"local": _local}


class UnknownProvider(KeyError):
    pass


def get_provider(name: str, home: str | None = None) -> Provider:
    """``home``: where the provider keeps its records of the clusters it launched."""
    try:
        factory = PROVIDERS[name]
    except KeyError:
        raise UnknownProvider(f"cloud.provider: got {name!r}; known providers: {', '.join(PROVIDERS)}") from None
    return factory(home)
