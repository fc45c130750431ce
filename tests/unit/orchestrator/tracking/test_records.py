"""What a run becomes in a tracker (records): its params flat with no credential among
them, its reports as metric points, its incidents as records and one-line tags, and its
end as result tags and a tracker status."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.schema import DISPLAY_KEYS
from orchestrator.runstate.events import IncidentRecorded
from orchestrator.tracking.records import (
    HIDDEN,
    MAX_PARAM,
    end_status,
    final_points,
    incident_key,
    incident_line,
    incident_record,
    loss_points,
    params,
    progress_points,
    result_summary,
    trial_points,
)
from orchestrator.tracking.series import Point
from orchestrator.wire.codec import to_plain

pytestmark = pytest.mark.unit


def test_params_are_the_composed_config_flat_without_notify_or_credentials() -> None:
    cfg = compose(["job=digits", "tracking=mlflow", "notify.webhook=https://hooks.example.com/T0/secret"])
    p = params(cfg)
    assert p["job.name"] == "digits" and p["tracking.kind"] == "mlflow" and "trainer.workers" in p
    assert not any(k.startswith("notify") for k in p)
    assert not any("hooks.example.com" in v for v in p.values())
    assert all(v != HIDDEN for v in p.values())  # nothing in the default config looks like one


def test_params_leave_out_what_shapes_a_commands_output() -> None:
    cfg = compose(["job=digits"])
    assert set(DISPLAY_KEYS) <= set(to_plain(cfg))  # there, to be left out
    assert not any(k.split(".", 1)[0] in DISPLAY_KEYS for k in params(cfg))


def test_params_hide_a_credential_and_a_url_with_user_information_and_cut_a_long_value() -> None:
    # validate refuses these: params is the last guard, so the config is made past it.
    cfg = compose(["job=digits", "tracking=mlflow"])
    tags = {
        "api_token": "abc123",
        "mirror": "https://user:pw@example.com/x",
        "use_auth": True,
        "note": "n" * (MAX_PARAM + 20),
        "team": "nlp",
    }
    p = params(replace(cfg, tracking=replace(cfg.tracking, tags=tags)))  # type: ignore[arg-type]
    assert p["tracking.tags.api_token"] == HIDDEN
    assert p["tracking.tags.mirror"] == HIDDEN
    assert p["tracking.tags.use_auth"] == "True"  # a switch under a credential's name is no credential
    assert p["tracking.tags.team"] == "nlp"
    note = p["tracking.tags.note"]
    assert len(note) == MAX_PARAM and note.endswith("...") and note.startswith("n" * (MAX_PARAM - 3))


def test_an_empty_group_is_one_param_and_values_are_text() -> None:
    cfg = compose(["job=digits", "tracking=mlflow"])
    p = params(cfg)
    assert p["tracking.tags"] == "{}"  # an empty dict is a value of its own, not left out
    assert p["tracking.flush_every_s"] == str(cfg.tracking.flush_every_s)
    assert p["tracking.uri"] == "None"
    assert all(isinstance(v, str) for v in p.values())


def test_loss_points_are_train_loss_at_their_steps_skipping_what_is_no_pair() -> None:
    points = loss_points([[1, 0.5], [2, 0.25], "bad", [3], [4, float("nan")]], 7.0)
    assert points[:2] == (Point("train/loss", 1, 0.5, 7.0), Point("train/loss", 2, 0.25, 7.0))
    assert len(points) == 3 and points[2].step == 4 and math.isnan(points[2].value)  # a diverged loss is kept


def test_progress_points_carry_steps_per_s_and_a_train_functions_metrics() -> None:
    points = progress_points({"step": 12, "steps_per_s": 3.5, "metrics": {"acc": 0.9}}, 5.0)
    assert set(points) == {Point("train/steps_per_s", 12, 3.5, 5.0), Point("metrics/acc", 12, 0.9, 5.0)}
    assert progress_points({"steps_per_s": 3.5}, 5.0) == ()  # no step, no point


def test_final_points_are_the_final_metrics_at_the_final_step() -> None:
    assert final_points({"final_step": 40, "metrics": {"accuracy": 0.97}}, 9.0) == (
        Point("final/accuracy", 40, 0.97, 9.0),
    )
    assert final_points({"metrics": {"accuracy": 0.97}}, 9.0) == ()


def test_trial_points_name_the_trial_and_drop_the_search_prefix() -> None:
    got = trial_points({"trial_id": "trial_00003", "iteration": 2, "metrics": {"loss": 0.4}}, 1.0)
    assert got == ("trial_00003", (Point("loss", 2, 0.4, 1.0),))
    assert trial_points({"trial_id": "../etc", "iteration": 2, "metrics": {"loss": 0.4}}, 1.0) is None
    assert trial_points({"trial_id": "trial_00003", "metrics": {"loss": 0.4}}, 1.0) is None


def _incident(**kw: object) -> IncidentRecorded:
    base: dict[str, object] = {"kind": "kill_region", "from_region": "a", "failed_at": 5.0, "detected_at": 6.0}
    return IncidentRecorded(**{**base, **kw})  # type: ignore[arg-type]


def test_an_incident_is_named_by_kind_generation_and_failure_time() -> None:
    first = _incident(generation=1, to_region="b")
    assert incident_key(first) == ("kill_region", 1, 5.0)
    assert incident_key(first) == incident_key(_incident(generation=1, to_region="b", rto_s=20.0))  # told again
    assert incident_key(first) != incident_key(_incident(generation=2))


def test_an_incident_record_keeps_what_is_known_only() -> None:
    record = incident_record(_incident(to_region="b", restored_step=40, lost_steps=12, rto_s=21.3, generation=2))
    assert record == {
        "kind": "kill_region",
        "from_region": "a",
        "to_region": "b",
        "restored_step": 40,
        "lost_steps": 12,
        "rto_s": 21.3,
        "generation": 2,
        "failed_at": 5.0,
    }


def test_an_incident_line_says_where_and_what_it_cost() -> None:
    full = _incident(to_region="b", restored_step=40, lost_steps=12, rto_s=21.34)
    assert incident_line(full) == "kill_region: a -> b, restored step 40, 12 steps lost, RTO 21.3 s"
    assert incident_line(_incident()) == "kill_region: a -> ?"


def test_result_summary_tags_the_results_scalars_and_the_final_checkpoint() -> None:
    result = {
        "status": "SUCCEEDED",
        "reason": None,
        "region": "b",
        "final_step": 40,
        "final_checkpoint": "s3://bucket/run/step_40",
        "checkpoint_sha256": "ab" * 32,
        "goodput": {"goodput": 0.912345},
        "metrics": {"accuracy": 0.9},
    }
    assert result_summary(result) == {
        "orchestrator.status": "SUCCEEDED",
        "orchestrator.region": "b",
        "orchestrator.final_step": "40",
        "orchestrator.final_checkpoint": "s3://bucket/run/step_40",
        "orchestrator.checkpoint_sha256": "ab" * 32,
        "orchestrator.goodput": "0.9123",
    }
    assert result_summary({"final_checkpoint": None, "goodput": {"goodput": "n/a"}}) == {}


@pytest.mark.parametrize(
    ("status", "tracker"),
    [
        ("SUCCEEDED", "FINISHED"),
        ("FAILED", "FAILED"),
        ("CANCELLED", "KILLED"),
        ("INTERRUPTED", "KILLED"),
        ("RUNNING", "FAILED"),
        (None, "FAILED"),
    ],
)
def test_the_runs_end_is_a_tracker_status(status: str | None, tracker: str) -> None:
    assert end_status(status) == tracker
