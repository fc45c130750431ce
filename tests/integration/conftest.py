"""The integration tier's in-process fixtures: the checkpoint stores of the tests that
start processes, open sockets or start Ray around code the unit tier covers."""

from __future__ import annotations

from tests.support.stores import flip_byte, memory_url, run_key, store_url, write_checkpoint, write_torn

__all__ = ["flip_byte", "memory_url", "run_key", "store_url", "write_checkpoint", "write_torn"]
