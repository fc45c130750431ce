"""Workloads: the built-ins by name, a user's class or Ray Train function by import path.

``job.workload`` is a built-in name (``BUILTINS``) or ``"module:Class"``;
``job.train_func`` is ``"module:function"``. Both are imported from the
controller's ``PYTHONPATH`` and working directory (and, on SkyPilot clusters,
from ``job.code_dir`` synced to the nodes). The checks here run in the
controller before anything launches and again where the code runs.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import types
import typing
from typing import Any

# Built-in names and where they live; gpt is written on the public protocol alone.
BUILTINS = {
    "digits": "orchestrator.workloads.digits:Digits",
    "synthetic": "orchestrator.workloads.synthetic:Synthetic",
    "gpt": "orchestrator.workloads.gpt:GPT",
}
WORKLOADS = tuple(BUILTINS)
# The protocol's methods (orchestrator/workloads/base.py); kept here so that checking a
# config needs no torch import.
REQUIRED = ("model", "optimizer", "loss")
DATA_METHODS = ("batch", "dataset")
# Built-ins that read job.lr / job.hidden_size / job.batch_size: what a search may vary.
JOB_KEY_WORKLOADS = ("digits", "synthetic")
# The keys of a train function's config (job.params) that say how many reports it will
# make, as Ray Train's examples spell them: one report per epoch. Without one, a
# function's progress has no total (job.steps is the built-in loop's, not its).
REPORT_COUNT_KEYS = ("num_epochs", "epochs")


class WorkloadError(Exception):
    """User code that cannot run: carries the config key it came from."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


def import_object(path: str, key: str) -> Any:
    """``"module:attr"`` (or a built-in name) to the object, or WorkloadError naming ``key``."""
    target = BUILTINS.get(path, path)
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        known = f"; built-ins: {', '.join(BUILTINS)}" if key == "job.workload" else ""
        raise WorkloadError(key, f"got {path!r}; expected 'module:name' (e.g. mypkg.models:Net){known}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        site = import_site(exc)
        if site is not None and not _is_package_of(missing, module_name):
            # The user's module was found: it is what it imports that is missing.
            raise WorkloadError(
                key,
                f"importing {module_name!r}: no module named {missing!r}, imported at {site}; install it "
                "(clusters: job.code_dir's requirements.txt) or fix that import",
            ) from None
        raise WorkloadError(
            key,
            f"cannot import {module_name!r} (no module named {missing!r}); put the folder that holds it "
            "on PYTHONPATH or run from it (clusters: job.code_dir)",
        ) from None
    except Exception as exc:  # the user's module raised while importing
        site = import_site(exc)
        at = f" at {site}" if site is not None else ""
        raise WorkloadError(key, f"importing {module_name!r} raised {type(exc).__name__}{at}: {_first(exc)}") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise WorkloadError(key, f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def import_site(exc: BaseException) -> str | None:
    """``file:line`` of the user's code where an import raised: the innermost frame of its
    traceback outside the import machinery; None when it never reached a file of theirs."""
    site = None
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not name.startswith("<") and name != __file__ and "importlib" not in name.split(os.sep):
            site = f"{name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return site


def _is_package_of(missing: str, module_name: str) -> bool:
    """Whether the missing module is ``module_name`` or a package on its path (the user's
    own module not found) rather than something it imports."""
    return module_name == missing or module_name.startswith(missing + ".")


def workload_class(path: str) -> type:
    """The class ``job.workload`` names, checked against the protocol."""
    cls = import_object(path, "job.workload")
    if not isinstance(cls, type):
        raise WorkloadError("job.workload", f"{path!r} is a {type(cls).__name__}, expected a class")
    missing = [m for m in REQUIRED if not callable(getattr(cls, m, None))]
    if missing:
        raise WorkloadError(
            "job.workload",
            f"{path!r} lacks required method{'s' if len(missing) > 1 else ''} {', '.join(missing)}; "
            "a workload defines model(), optimizer(model), loss(model, batch) and batch() or dataset()",
        )
    if not any(callable(getattr(cls, m, None)) for m in DATA_METHODS):
        raise WorkloadError(
            "job.workload",
            f"{path!r} defines neither batch(step, rank, world) nor dataset(); define one of them",
        )
    return cls


def train_function(path: str) -> Any:
    fn = import_object(path, "job.train_func")
    if not callable(fn) or isinstance(fn, type):
        raise WorkloadError("job.train_func", f"{path!r} is not a function")
    return fn


def declared_reports(params: typing.Mapping[str, Any]) -> int | None:
    """How many reports a train function with config ``params`` says it will make, or None."""
    for key in REPORT_COUNT_KEYS:
        value = params.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def is_builtin(path: str) -> bool:
    return path in BUILTINS


def validate_params(cls: type, params: dict[str, Any]) -> dict[str, Any]:
    """``job.params`` checked against ``cls.Params`` (a dataclass) when the class has one:
    unknown keys, missing required ones and wrong types are refused; defaults filled in."""
    schema = getattr(cls, "Params", None)
    if schema is None or not dataclasses.is_dataclass(schema):
        return dict(params)
    fields = {f.name: f for f in dataclasses.fields(schema)}
    hints = typing.get_type_hints(schema, globalns=vars(sys.modules.get(schema.__module__, types.ModuleType("m"))))
    for key in params:
        if key not in fields:
            raise WorkloadError(f"job.params.{key}", f"unknown key; {cls.__name__}.Params has: {', '.join(fields)}")
    out: dict[str, Any] = {}
    for name, f in fields.items():
        if name in params:
            out[name] = _coerce(f"job.params.{name}", params[name], hints.get(name, Any))
        elif f.default is not dataclasses.MISSING:
            out[name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[name] = f.default_factory()
        else:
            raise WorkloadError(
                f"job.params.{name}", f"is required by {cls.__name__}.Params; set job.params.{name}=..."
            )
    return out


def _coerce(key: str, value: Any, hint: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(key, value, option)
            except WorkloadError:
                continue
        raise WorkloadError(key, f"got {value!r}; expected {_name(hint)}")
    if origin is typing.Literal:
        if value not in args:
            raise WorkloadError(key, f"got {value!r}; allowed: {', '.join(map(str, args))}")
        return value
    base = origin or hint
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
        list: isinstance(value, list | tuple),
        tuple: isinstance(value, list | tuple),
        dict: isinstance(value, dict),
    }.get(base, True)
    if not ok:
        raise WorkloadError(key, f"got {value!r}; expected {_name(hint)}")
    if base is float:
        return float(value)
    if base in (list, tuple):
        items = list(value)
        if base is list and args:
            try:
                items = [_coerce(key, item, args[0]) for item in items]
            except WorkloadError:
                raise WorkloadError(key, f"got {value!r}; expected {_name(hint)}") from None
        return items if base is list else tuple(items)
    return value


def _name(hint: Any) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list"}
    if hint in names:
        return names[hint]
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def make_workload(job: dict[str, Any], data: dict[str, Any] | None = None) -> Any:
    """The workload a job names, constructed where it runs (a worker, a trial)."""
    cls = workload_class(str(job["workload"]))
    from_job = getattr(cls, "from_job", None)
    if from_job is not None and is_builtin(str(job["workload"])):
        # digits and synthetic predate job.params: they read job.* and data.*.
        return from_job(job, data or {})
    return cls(validate_params(cls, dict(job.get("params") or {})))


def construct_problem(job: dict[str, Any]) -> WorkloadError | None:
    """Construct the workload a job names (not a built-in: those take job.* and load data),
    as every worker will; the constructor's exception as one WorkloadError naming the
    class, the user's file and line, and the message. Run before anything launches, so a
    constructor that always raises costs no cluster (``python -m orchestrator.workloads``)."""
    path = str(job.get("workload") or "")
    if not path or job.get("train_func") or is_builtin(path):
        return None
    try:
        make_workload(job)
    except WorkloadError as exc:
        return exc
    except Exception as exc:  # the user's constructor
        site = import_site(exc)
        at = f" at {site}" if site is not None else ""
        return WorkloadError(
            "job.workload", f"{path}(job.params) raised {type(exc).__name__}{at}: {_first(exc)}; fix it or job.params"
        )
    return None


def _first(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no detail"
