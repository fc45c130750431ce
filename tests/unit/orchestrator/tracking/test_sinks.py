"""What a tracker is to the listener (sinks): the Sink protocol both sinks keep, what a
sink's start says, the error that says how to install a missing SDK, and the lazy
import: a tracker's SDK is imported only when a run names it (``tracker.make_sink``,
which picks the sink), so a run without tracking imports neither MLflow nor W&B."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
import types
from typing import Any

import pytest

import orchestrator
from orchestrator.config.compose import compose
from orchestrator.tracking.mlflow_sink import MlflowSink
from orchestrator.tracking.sinks import Sink, Started, missing
from orchestrator.tracking.tracker import make_sink
from orchestrator.tracking.wandb_sink import WandbSink

pytestmark = pytest.mark.unit

SDKS = ("mlflow", "mlflow.entities", "mlflow.tracking", "wandb")


class _Client:
    def __init__(self, tracking_uri: str | None = None) -> None:
        self.tracking_uri = tracking_uri


def _fake_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``mlflow`` with what MlflowSink imports, and nothing that talks to a server."""
    root, entities, tracking = (types.ModuleType(n) for n in ("mlflow", "mlflow.entities", "mlflow.tracking"))
    for name in ("Metric", "Param", "RunTag"):
        setattr(entities, name, type(name, (), {}))
    tracking.MlflowClient = _Client  # type: ignore[attr-defined]
    for module in (root, entities, tracking):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)  # restored after the test
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)


def _block(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """``import name`` raises ImportError while the test runs (None in sys.modules)."""
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def test_started_is_the_tracker_runs_id_and_whether_it_was_taken_up_again() -> None:
    started = Started("abc", resumed=True)
    assert (started.tracker_run, started.resumed) == ("abc", True)
    assert started == Started("abc", True) and started != Started("abc", False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        started.resumed = False  # type: ignore[misc]


def test_a_missing_sdk_says_which_package_why_and_how_to_install() -> None:
    error = missing("mlflow-skinny", ImportError("No module named 'mlflow'"))
    assert isinstance(error, ImportError)
    assert "mlflow-skinny" in str(error) and "No module named 'mlflow'" in str(error)
    assert "pip install -e '.[tracking]'" in str(error)


def test_the_tracking_modules_import_with_no_sdk_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Executed afresh with both SDKs made unimportable: a module-level import of either fails.
    old = sys.modules["orchestrator.tracking.tracker"]
    monkeypatch.setattr(orchestrator, "tracking", sys.modules["orchestrator.tracking"])  # put back after
    for name in [n for n in sys.modules if n == "orchestrator.tracking" or n.startswith("orchestrator.tracking.")]:
        monkeypatch.delitem(sys.modules, name)
    _block(monkeypatch, *SDKS)
    fresh = [
        importlib.import_module(f"orchestrator.tracking.{m}")
        for m in ("tracker", "sinks", "records", "series", "mlflow_sink", "wandb_sink")
    ]
    assert fresh[0] is not old
    assert all(sys.modules[name] is None for name in SDKS)  # none was imported meanwhile


def test_choosing_mlflow_imports_mlflow_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    _fake_mlflow(monkeypatch)
    _block(monkeypatch, "wandb")
    cfg = compose(["job=digits", "tracking=mlflow", "tracking.uri=http://127.0.0.1:5000"])
    sink = make_sink(cfg, "run-1", str(tmp_path))
    assert isinstance(sink, MlflowSink) and sink.client.tracking_uri == "http://127.0.0.1:5000"
    assert sys.modules["wandb"] is None


def test_choosing_wandb_imports_wandb_alone(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setitem(sys.modules, "wandb", types.ModuleType("wandb"))
    _block(monkeypatch, "mlflow", "mlflow.entities", "mlflow.tracking")
    sink = make_sink(compose(["job=digits", "tracking=wandb"]), "run-1", str(tmp_path))
    assert isinstance(sink, WandbSink) and sink.wandb is sys.modules["wandb"]
    assert all(sys.modules[name] is None for name in ("mlflow", "mlflow.entities", "mlflow.tracking"))


@pytest.mark.parametrize(("kind", "package"), [("mlflow", "mlflow-skinny"), ("wandb", "wandb")])
def test_a_named_tracker_without_its_sdk_is_an_import_error_saying_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, kind: str, package: str
) -> None:
    _block(monkeypatch, *SDKS)
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    with pytest.raises(ImportError, match=r"tracking needs " + package + r",.*pip install"):
        make_sink(compose(["job=digits", f"tracking={kind}"]), "run-1", str(tmp_path))


def test_no_tracker_has_no_sink(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="has no sink"):
        make_sink(compose(["job=digits"]), "run-1", str(tmp_path))


def _protocol_methods() -> list[str]:
    return [n for n, v in vars(Sink).items() if inspect.isfunction(v) and not n.startswith("_")]


@pytest.mark.parametrize("sink", [MlflowSink, WandbSink])
def test_each_sink_has_the_protocols_calls_with_its_parameters(sink: type) -> None:
    names = _protocol_methods()
    assert set(names) == {"start", "child", "written", "metrics", "tags", "incident", "checkpoint", "finish"}
    for name in names:
        want = inspect.signature(getattr(Sink, name))
        got = inspect.signature(getattr(sink, name))
        assert list(got.parameters) == list(want.parameters), f"{sink.__name__}.{name}"
        assert got.return_annotation == want.return_annotation, f"{sink.__name__}.{name}"
