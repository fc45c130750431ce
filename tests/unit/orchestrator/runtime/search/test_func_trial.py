"""A train function's trial, Ray aside: what a report gives Tune, the digest that names its
checkpoint, and what its report sink hands on to Ray Train."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.runtime.loop.worker import UserCodeError
from orchestrator.runtime.search.func_trial import (
    TrialSink,
    folder_digest_of,
    func_report,
    write_func_checkpoint,
)
from orchestrator.runtime.search.snapshot import METRICS_KEY
from recovery.manifest import checkpoint_digest

pytestmark = pytest.mark.unit


def test_a_report_gives_tune_its_numbers_the_iteration_and_the_checkpoint_digest() -> None:
    payload = func_report({"accuracy": 0.75, "epoch": 2, "note": "text", "bad name": 1.0}, "accuracy", 3, "ab" * 32)
    assert payload == {
        "accuracy": 0.75,
        "epoch": 2.0,
        METRICS_KEY: {"accuracy": 0.75, "epoch": 2.0},
        "iteration": 3,
        "weights_sha256": None,
        "checkpoint_sha256": "ab" * 32,
    }


def test_a_report_without_the_searched_metric_fails_the_trial_naming_what_it_had() -> None:
    with pytest.raises(
        UserCodeError, match=r"optimises 'accuracy', and the train function's report returned epoch, loss"
    ):
        func_report({"loss": 0.5, "epoch": 1}, "accuracy", 1, None)


def test_the_digest_of_a_folder_is_a_function_runs_checkpoint_digest_of_its_files(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "model.pt").write_bytes(b"m")
    (tmp_path / "sub" / "opt.pt").write_bytes(b"o")
    import hashlib

    want = checkpoint_digest(
        {"model.pt": hashlib.sha256(b"m").hexdigest(), "sub/opt.pt": hashlib.sha256(b"o").hexdigest()}
    )
    assert folder_digest_of({"model.pt": b"m", "sub/opt.pt": b"o"}) == want
    # Tune's folder of the trial: the function's files apart from the reports it stands after,
    # copied once, the digest taken as they are copied.
    out = tmp_path.parent / "tune-ckpt"
    out.mkdir()
    assert write_func_checkpoint(str(tmp_path), 2, str(out)) == want
    assert (out / "files" / "model.pt").read_bytes() == b"m" and (out / "files" / "sub" / "opt.pt").read_bytes() == b"o"
    assert (out / "func.json").read_text() == '{"iteration": 2}'


def test_the_sink_hands_the_reported_checkpoint_on_and_starts_a_new_trial_with_none() -> None:
    marker = object()
    assert TrialSink(None).report({"x": 1.0}, marker, False) is marker
    assert TrialSink(None).get_checkpoint() is None
