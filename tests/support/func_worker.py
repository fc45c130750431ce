"""A train function's worker in the test's own process: Ray's local-mode utils standing in
for a one-worker Ray Train group, the user's module written to a folder of the test, and
a thread standing in for the controller's side of the chaos rendezvous."""

from __future__ import annotations

import contextlib
import importlib
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from ray.train.v2._internal.execution import train_fn_utils as ray_fn_utils
from ray.train.v2._internal.execution.train_fn_utils import LocalTrainFnUtils

from orchestrator.wire.control import ControlChannel
from orchestrator.wire.schema import ChaosRequest


@contextlib.contextmanager
def local_train_worker() -> Iterator[LocalTrainFnUtils]:
    """This process as a one-worker Ray Train group (Ray's local mode utils)."""
    before = ray_fn_utils._train_fn_utils
    inner = LocalTrainFnUtils(experiment_name="unit")
    ray_fn_utils.set_train_fn_utils(inner)
    try:
        yield inner
    finally:
        ray_fn_utils.set_train_fn_utils(before)


@contextlib.contextmanager
def user_module(folder: Path, monkeypatch: pytest.MonkeyPatch, name: str, code: str) -> Iterator[ModuleType]:
    """``code`` as the module ``name`` in ``folder``, first on sys.path, imported fresh."""
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(code))
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, name, raising=False)
    try:
        yield importlib.import_module(name)
    finally:
        sys.modules.pop(name, None)


@contextlib.contextmanager
def injector(control: ControlChannel, on_request: Callable[[ChaosRequest], None]) -> Iterator[None]:
    """Fires every fault the runtime asks for (the controller's side of the rendezvous)."""
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            for i, req in control.chaos_requests().items():
                if req.seq > control.fired_count(i):
                    on_request(req)
                    control.chaos_fired(i, req.seq, step=req.step)
            time.sleep(0.02)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
