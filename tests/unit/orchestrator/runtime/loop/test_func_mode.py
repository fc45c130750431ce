"""job.train_func without a Ray cluster: the report hook, step numbering, rank merging,
checkpoint_sha256, restore, preemption and user errors, on real file:// stores.

Ray's local-mode TrainFnUtils stands in for a Ray Train worker's: ray.train.report and
get_context work in this process as they do in a one-worker group.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from ray.train.v2._internal.execution import train_fn_utils as ray_fn_utils
from ray.train.v2._internal.execution.train_fn_utils import LocalTrainFnUtils

from orchestrator.runtime.checkpoint.scratch import write_files
from orchestrator.runtime.loop import func_mode
from orchestrator.runtime.loop.func_mode import (
    StoreFnUtils,
    annotated_report_line,
    call_user_function,
    catalog_of,
    layout_of,
    plan_report,
    read_checkpoint_dir,
    reports_at,
    restore_batches,
    routed_through,
)
from orchestrator.runtime.loop.worker import UserCodeError
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.schema import ChaosRequest
from orchestrator.wire.spec import RuntimeSpec
from recovery.manifest import checkpoint_digest
from recovery.store import CheckpointStore
from tests.support import func_worker
from tests.support.func_worker import injector
from tests.support.runs import loop_spec
from tests.support.stores import TEST_KEY

MODULE = "unit_user_train"

# Written the way Ray's documentation shows, and imported before the hook is installed:
# the names bound at its top (report, get_checkpoint) must reach our store all the same.
USER_CODE = """
import os
import tempfile

import ray.train
from ray import train
from ray.train import Checkpoint, get_checkpoint, report


def train_func(config):
    start = 0
    ckpt = get_checkpoint()
    if ckpt:
        with ckpt.as_directory() as d:
            with open(os.path.join(d, "epoch.txt")) as fh:
                start = int(fh.read()) + 1
    rank = ray.train.get_context().get_world_rank()
    for epoch in range(start, config["epochs"]):
        if epoch == config.get("fail_at"):
            raise ValueError(f"bad batch in epoch {epoch}")
        metrics = {"loss": 1.0 / (epoch + 1), "epoch": epoch, "resumed_from_epoch": start}
        if config.get("metrics_only_first"):
            report({"loss": 9.0, "epoch": epoch})
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "epoch.txt"), "w") as fh:
                fh.write(str(epoch))
            os.makedirs(os.path.join(d, "sub"))
            with open(os.path.join(d, "sub", "notes.txt"), "w") as fh:
                fh.write("x" * epoch)
            checkpoint = Checkpoint.from_directory(d) if rank == 0 else None
            # Every spelling the documentation uses.
            [report, train.report, ray.train.report][epoch % 3](metrics, checkpoint=checkpoint)
        with open(config["trace"], "a") as fh:
            fh.write(f"{epoch}\\n")
"""


# --- pure pieces ----------------------------------------------------------------------------


def test_every_report_is_one_step_of_the_clock_and_one_with_a_checkpoint_commits_it_as_that_step() -> None:
    assert plan_report(0, any_checkpoint=True, preempting=False, async_upload=True).step == 1
    restored = plan_report(7, any_checkpoint=True, preempting=False, async_upload=True)
    assert (restored.step, restored.commit, restored.wait, restored.stop) == (8, True, False, False)
    metrics_only = plan_report(7, any_checkpoint=False, preempting=False, async_upload=True)
    assert (metrics_only.step, metrics_only.commit) == (8, False)
    assert plan_report(3, any_checkpoint=True, preempting=False, async_upload=False).wait


def test_a_preemption_waits_for_the_next_checkpoint_commits_it_and_stops() -> None:
    no_ckpt = plan_report(4, any_checkpoint=False, preempting=True, async_upload=True)
    assert (no_ckpt.commit, no_ckpt.wait, no_ckpt.stop) == (False, False, False)
    ckpt = plan_report(4, any_checkpoint=True, preempting=True, async_upload=True)
    assert (ckpt.step, ckpt.commit, ckpt.wait, ckpt.stop) == (5, True, True, True)


def test_rank_folders_make_one_checkpoint_each_file_put_by_the_lowest_rank_holding_it() -> None:
    m, a, b = ("m", (1, "mm")), ("shard-0.pt", (1, "aa")), ("shard-1.pt", (1, "bb"))
    assert layout_of([None, None]) is None
    one = layout_of([dict([m]), None])
    assert one is not None and one.owners == {"m": 0} and one.remote() == {} and one.conflicts == []
    both = layout_of([dict([m, a]), dict([m, b]), None])
    assert both is not None and both.owners == {"m": 0, "shard-0.pt": 0, "shard-1.pt": 1}
    assert both.remote() == {"shard-1.pt": (1, 1, "bb")} and both.conflicts == []
    # A clash keeps the lowest rank's bytes, whichever rank that is.
    clash = layout_of([None, {"log.txt": (5, "r1"), "x": (1, "xx")}, {"log.txt": (5, "r2")}])
    assert clash is not None and clash.owners == {"log.txt": 1, "x": 1} and clash.conflicts == ["log.txt"]
    assert clash.entries["log.txt"] == (5, "r1")
    empty = layout_of([{}, None])  # an empty folder is still a checkpoint
    assert empty is not None and empty.owners == {}


def test_a_catalog_names_each_files_size_and_sha256() -> None:
    assert catalog_of({"a": b"xyz"}) == {"a": (3, hashlib.sha256(b"xyz").hexdigest())}


def test_a_restore_holds_one_bounded_batch_at_a_time_a_larger_file_alone() -> None:
    sizes = {"big": 100, "a": 30, "b": 30, "c": 30, "d": 5}
    assert restore_batches(sizes, 64) == [["big"], ["a", "b"], ["c", "d"]]
    assert restore_batches({}, 64) == []
    assert restore_batches({"x": 0, "y": 0}, 64) == [["x", "y"]]


def test_checkpoint_sha256_covers_sorted_names_and_digests() -> None:
    digests = {"sub/b.pt": "bb", "a.pt": "aa"}
    assert checkpoint_digest(digests) == hashlib.sha256(b"a.pt aa\nsub/b.pt bb\n").hexdigest()
    assert checkpoint_digest(dict(reversed(list(digests.items())))) == checkpoint_digest(digests)
    assert checkpoint_digest({**digests, "a.pt": "ab"}) != checkpoint_digest(digests)
    assert checkpoint_digest({"b.pt": "aa", "sub/b.pt": "bb"}) != checkpoint_digest(digests)


def test_a_checkpoint_folder_round_trips_with_subfolders(tmp_path: Path) -> None:
    files = {"model.pt": b"\x00\x01", "sub/deeper/opt.pt": b"opt", "sub/MANIFEST.json": b"{}"}
    write_files(files, str(tmp_path / "out"))
    assert read_checkpoint_dir(str(tmp_path / "out")) == files


def test_a_checkpoint_may_not_hold_our_commit_record_at_its_top(tmp_path: Path) -> None:
    (tmp_path / "MANIFEST.json").write_text("{}")
    with pytest.raises(UserCodeError, match=r"MANIFEST\.json"):
        read_checkpoint_dir(str(tmp_path))


def test_the_function_gets_its_config_when_it_takes_one() -> None:
    assert call_user_function(lambda config: config["a"], {"a": 1}) == 1
    assert call_user_function(lambda: "bare", {"a": 1}) == "bare"


# --- the hook -----------------------------------------------------------------------------


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with func_worker.user_module(tmp_path / "code", monkeypatch, MODULE, USER_CODE) as module:
        yield module


class Sink:
    def __init__(self) -> None:
        self.reports: list[tuple[dict[str, Any], Any]] = []
        self.restored: Any = None

    def report(self, metrics: dict[str, Any], checkpoint: Any, delete_local: bool) -> None:
        self.reports.append((metrics, checkpoint))

    def get_checkpoint(self) -> Any:
        return self.restored


def test_every_spelling_of_report_reaches_the_sink_and_ray_gets_the_metrics_alone(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path
) -> None:
    import ray.train

    sink = Sink()
    with routed_through(sink) as ours:
        assert ray_fn_utils.get_train_fn_utils() is ours
        sink.restored = object()
        assert ray.train.get_checkpoint() is sink.restored
        assert user_module.get_checkpoint() is sink.restored  # bound when the module was imported
        assert ray.train.get_context().get_world_rank() == 0  # the rest is Ray's
        sink.restored = None
        user_module.train_func({"epochs": 3, "trace": str(tmp_path / "trace")})
    assert [m["epoch"] for m, _ in sink.reports] == [0, 1, 2]
    assert all(c is not None for _, c in sink.reports)
    assert ray_worker._get_last_metrics() == sink.reports[-1][0]
    assert ray_worker.get_checkpoint() is None  # Ray never saw a checkpoint
    assert ray_fn_utils.get_train_fn_utils() is ray_worker


def test_all_reported_checkpoints_is_refused_by_name_not_answered_empty(ray_worker: LocalTrainFnUtils) -> None:
    import ray.train

    with routed_through(Sink()), pytest.raises(RuntimeError, match=r"get_all_reported_checkpoints.*get_checkpoint"):
        ray.train.get_all_reported_checkpoints()


def test_ray_s_utils_come_back_when_the_function_raises(ray_worker: LocalTrainFnUtils) -> None:
    with pytest.raises(RuntimeError), routed_through(Sink()):
        assert isinstance(ray_fn_utils.get_train_fn_utils(), StoreFnUtils)
        raise RuntimeError("user bug")
    assert ray_fn_utils.get_train_fn_utils() is ray_worker


def test_ray_train_v1_is_refused_rather_than_bypassing_our_stores(
    ray_worker: LocalTrainFnUtils, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(func_mode, "is_v2_enabled", lambda: False)
    with pytest.raises(RuntimeError, match="Ray Train v2"), routed_through(Sink()):
        pass
    assert ray_fn_utils.get_train_fn_utils() is ray_worker


# --- the worker, end to end on file:// stores -----------------------------------------------


def make_spec(root: Path, generation: int, params: dict[str, Any], async_upload: bool = True) -> RuntimeSpec:
    return loop_spec(
        root,
        "fn-unit",
        generation,
        {"name": "fn", "workload": "", "train_func": f"{MODULE}:train_func", "steps": 5, "params": params},
        trainer={"max_worker_restarts": 0},
        checkpoint={"interval_steps": 1, "async_upload": async_upload},
    )


def events(spec: RuntimeSpec, type_: str) -> list[dict[str, Any]]:
    return [e for e in ControlChannel(spec.control_url).read_events(spec.generation, set()) if e["type"] == type_]


def run_worker(spec: RuntimeSpec) -> None:
    func_mode.train_func({"spec": spec.to_plain()})


def test_reports_commit_numbered_checkpoints_and_a_new_attempt_resumes_from_the_newest(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    # Synchronous uploads: with async ones a newer snapshot may replace one still queued.
    first = make_spec(tmp_path, 1, {"epochs": 3, "trace": str(trace)}, async_upload=False)
    run_worker(first)
    store = CheckpointStore(first.store_url, region="r", key=TEST_KEY)
    assert store.committed_steps("fn-unit") == [1, 2, 3]
    m3 = store.manifest("fn-unit", 3)
    # The function's files, and the RNG states of its one rank beside them.
    assert m3 is not None and {f.name for f in m3.files} == {"epoch.txt", "sub/notes.txt", ".orchestrator/rng-rank0.pt"}
    assert store.read(m3, "epoch.txt") == b"2"
    final = ControlChannel(first.control_url).read_final(1)
    assert final is not None and final["final_step"] == 3
    assert final["metrics"] == {"loss": 1.0 / 3, "epoch": 2, "resumed_from_epoch": 0}
    assert final["weights_sha256"] is None  # text files: no tensor, no model to fingerprint
    assert final["checkpoint_sha256"] == checkpoint_digest({f.name: f.sha256 for f in m3.files})
    assert final["final_checkpoint"] == store.checkpoint_url("fn-unit", 3)
    assert [e["restored_step"] for e in events(first, "train_started")] == [0]
    assert events(first, "workers_started") and events(first, "workers_ready")

    second = make_spec(tmp_path, 2, {"epochs": 5, "trace": str(trace)})
    run_worker(second)
    started = events(second, "train_started")
    assert [(e["restored_step"], e["restored_from"]) for e in started] == [(3, store.checkpoint_url("fn-unit", 3))]
    assert store.committed_steps("fn-unit")[-1] == 5
    final = ControlChannel(second.control_url).read_final(2)
    assert final is not None and final["final_step"] == 5
    # The function saw the restored checkpoint through get_checkpoint and went on after it.
    assert final["metrics"] == {"loss": 1.0 / 5, "epoch": 4, "resumed_from_epoch": 3}
    assert trace.read_text().split() == ["0", "1", "2", "3", "4"]
    m5 = store.manifest("fn-unit", 5)
    assert m5 is not None and final["checkpoint_sha256"] == checkpoint_digest({f.name: f.sha256 for f in m5.files})
    # Its progress: the reports it made, of the epochs its config declares (not job.steps).
    prog = ControlChannel(second.control_url).read_progress(2)
    assert prog is not None and (prog.step, prog["reports"], prog["total"]) == (5, 5, 5)
    assert m5.extra["reports"] == 5


def test_a_corrupt_newest_checkpoint_is_skipped_on_restore(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path, flip_byte: Any
) -> None:
    trace = tmp_path / "trace"
    run_worker(make_spec(tmp_path, 1, {"epochs": 2, "trace": str(trace)}, async_upload=False))
    store = CheckpointStore(f"file://{tmp_path}/store", region="r", key=TEST_KEY)
    flip_byte(store, "fn-unit", 2, "sub/notes.txt")
    second = make_spec(tmp_path, 2, {"epochs": 3, "trace": str(trace)})
    run_worker(second)
    assert [e["step"] for e in events(second, "checkpoint_skipped")] == [2]
    assert events(second, "train_started")[0]["restored_step"] == 1
    final = ControlChannel(second.control_url).read_final(2)
    # Restored step 1 (epoch 0): epochs 1 and 2 again, as steps 2 and 3.
    assert final is not None and final["final_step"] == 3 and final["metrics"]["resumed_from_epoch"] == 1


def test_a_preemption_notice_commits_the_next_checkpoint_and_stops_the_function(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    spec = make_spec(tmp_path, 1, {"epochs": 4, "trace": str(trace), "metrics_only_first": True})
    control = ControlChannel(spec.control_url)
    control.preempt_notice(1)
    run = func_mode.FuncRun(spec, 0, 1, control)
    deadline = time.monotonic() + 10
    while not run._preempt.is_set():
        assert time.monotonic() < deadline, "the preemption watch never saw the notice"
        time.sleep(0.05)
    with pytest.raises(func_mode.Stop):
        run.run()
    # The metrics-only report went on; the one with a checkpoint committed it and stopped.
    # Its step is the function's clock: the second report.
    assert events(spec, "preempted")[0]["step"] == 2
    assert CheckpointStore(spec.store_url, region="r", key=TEST_KEY).committed_steps("fn-unit") == [2]
    assert not trace.exists()  # nothing after that report ran
    assert control.read_final(1) is None


def test_an_exception_from_the_function_is_a_user_error_with_its_traceback(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SkyPilot leaves sys.tracebacklimit at 0 after an exception passes its UX wrapper
    monkeypatch.setattr(sys, "tracebacklimit", 0, raising=False)
    spec = make_spec(tmp_path, 1, {"epochs": 4, "trace": str(tmp_path / "trace"), "fail_at": 2}, async_upload=False)
    with pytest.raises(ValueError, match="bad batch"):
        run_worker(spec)
    (err,) = events(spec, "user_error")
    assert err["error"] == "ValueError: bad batch in epoch 2"
    assert "unit_user_train.py" in err["traceback"]
    assert CheckpointStore(spec.store_url, region="r", key=TEST_KEY).committed_steps("fn-unit") == [1, 2]
    assert ray_fn_utils.get_train_fn_utils() is ray_worker


def test_a_function_that_does_not_import_is_a_user_error(ray_worker: LocalTrainFnUtils, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, 1, {})
    spec = replace(spec, job=replace(spec.job, train_func="no_such_module_here:train_func"))
    with pytest.raises(Exception, match="no_such_module_here"):
        run_worker(spec)
    assert "no_such_module_here" in events(spec, "user_error")[0]["error"]


# --- chaos: the runtime's rendezvous, a thread standing in for the controller's injector ---------


def test_during_checkpoint_upload_meets_the_injector_before_the_function_goes_on(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    spec = make_spec(tmp_path, 1, {"epochs": 2, "trace": str(trace)})
    spec = replace(spec, faults=[{"kind": "kill_region", "during": "checkpoint_upload", "repeat": 1}])
    store = CheckpointStore(spec.store_url, region="r", key=TEST_KEY)
    seen: list[tuple[ChaosRequest, bool]] = []
    with injector(ControlChannel(spec.control_url, keys=TEST_KEY), lambda req: seen.append((req, trace.exists()))):
        run_worker(spec)
    ((req, traced),) = seen  # repeat: 1
    assert (req.during, req.step) == ("checkpoint_upload", 1)
    # Half way through the upload (files sent, no manifest) and the function still in report().
    assert not traced
    assert store.committed_steps("fn-unit")[-1] == 2


def test_during_restore_meets_the_injector_once_a_checkpoint_is_chosen(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    run_worker(make_spec(tmp_path, 1, {"epochs": 2, "trace": str(trace)}, async_upload=False))
    spec = make_spec(tmp_path, 2, {"epochs": 3, "trace": str(trace)})
    spec = replace(spec, faults=[{"kind": "kill_region", "during": "restore", "repeat": 1}])
    seen: list[ChaosRequest] = []
    with injector(ControlChannel(spec.control_url, keys=TEST_KEY), seen.append):
        run_worker(spec)
    assert [(r.during, r.step) for r in seen] == [("restore", 2)]
    assert events(spec, "train_started")[0]["restored_step"] == 2


# --- two ranks over a real gloo group (no Ray): the collectives in report() ----------------------


def test_a_restored_functions_report_count_is_its_checkpoints_or_at_least_its_step() -> None:
    assert reports_at({"reports": 12}, 4) == 12
    # Committed before reports were counted (or a count that cannot be): its step.
    assert reports_at({}, 4) == 4 and reports_at({"reports": 2}, 4) == 4 and reports_at({"reports": True}, 4) == 4


def test_rays_log_line_for_a_report_that_carried_a_checkpoint_says_where_it_went() -> None:
    line = "Reporting training result 2: TrainingReport(checkpoint=None, metrics={'loss': 0.5}, validation=False)"
    ours = line.replace("checkpoint=None", "checkpoint=<step 7 in the run's stores>")
    assert annotated_report_line(line, {2: 7}) == ours
    # A report with no checkpoint, and any other line, stay as Ray wrote them.
    assert annotated_report_line(line, {1: 6}) == line
    assert annotated_report_line("Reporting training result 2: something else", {2: 7}).endswith("something else")


def test_a_restored_folder_lies_on_the_nodes_scratch_disk_which_goes_with_its_cluster(
    ray_worker: LocalTrainFnUtils, user_module: Any, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    run_worker(make_spec(tmp_path, 1, {"epochs": 2, "trace": str(trace)}, async_upload=False))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    spec = replace(make_spec(tmp_path, 2, {"epochs": 3, "trace": str(trace)}), scratch_dir=str(scratch))
    run = func_mode.FuncRun(spec, 0, 1, ControlChannel(spec.control_url))
    assert run.restore() == 2 and run.restored_dir is not None
    # A rank killed now leaves its folder to the cluster's teardown, not in the machine's /tmp.
    assert Path(run.restored_dir).parent == scratch / func_mode.RESTORED
    assert sorted(p.name for p in Path(run.restored_dir).iterdir()) == ["epoch.txt", "sub"]
    shutil.rmtree(run.restored_dir)
