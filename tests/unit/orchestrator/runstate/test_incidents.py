"""Incident arithmetic: detection delay, steps lost (RPO) and recovery time (RTO)."""

from __future__ import annotations

from orchestrator.runstate.incidents import Incident


def incident(**kw: object) -> Incident:
    base: dict[str, object] = {
        "kind": "cluster_lost",
        "from_region": "local-a",
        "to_region": "local-b",
        "failed_at": 1000.0,
        "detected_at": 1003.25,
        "last_step": 73,
        "restored_step": 60,
        "first_step_at": 1012.5,
        "generation": 2,
    }
    base.update(kw)
    return Incident(**base)  # type: ignore[arg-type]


def test_detection_delay_lost_steps_and_rto_are_measured_from_the_failure() -> None:
    inc = incident()
    assert inc.detected_after_s == 3.25
    assert inc.lost_steps == 13
    assert inc.rto_s == 12.5


def test_unknown_restore_and_first_step_leave_lost_steps_and_rto_unknown() -> None:
    inc = incident(restored_step=None, first_step_at=None)
    assert (inc.lost_steps, inc.rto_s) == (None, None)


def test_clock_skew_and_restoring_past_the_last_known_step_never_go_negative() -> None:
    inc = incident(detected_at=999.0, first_step_at=998.0, restored_step=80)
    assert (inc.detected_after_s, inc.lost_steps, inc.rto_s) == (0.0, 0, 0.0)


def test_record_holds_the_fields_and_the_derived_numbers_rounded_to_ms() -> None:
    rec = incident(detected_at=1003.123456, first_step_at=1012.987654).record()
    assert rec["kind"] == "cluster_lost"
    assert (rec["from_region"], rec["to_region"]) == ("local-a", "local-b")
    assert rec["detected_after_s"] == 3.123
    assert rec["restored_step"] == 60
    assert rec["lost_steps"] == 13
    assert rec["rto_s"] == 12.988
    assert rec["generation"] == 2


def test_record_of_an_open_incident_has_null_rto_and_lost_steps() -> None:
    rec = incident(to_region=None, restored_step=None, first_step_at=None).record()
    assert (rec["to_region"], rec["restored_step"], rec["lost_steps"], rec["rto_s"]) == (
        None,
        None,
        None,
        None,
    )


def test_an_incident_ends_when_the_runtime_says_its_first_step_was_done_not_when_a_report_came() -> None:
    from orchestrator.runstate.incidents import first_step_time

    said = {"restored_step": 60, "resumed_at": 1010.2}
    assert first_step_time(said, 60, failed_at=1000.0, reported_at=1010.7) == 1010.2
    # A report of another restore, no word, or a time outside the failure and the report: the report's time.
    assert first_step_time({**said, "restored_step": 50}, 60, 1000.0, 1010.7) == 1010.7
    assert first_step_time({"restored_step": 60}, 60, 1000.0, 1010.7) == 1010.7
    assert first_step_time({**said, "resumed_at": 999.0}, 60, 1000.0, 1010.7) == 1010.7
    assert first_step_time({**said, "resumed_at": 1011.0}, 60, 1000.0, 1010.7) == 1010.7
    assert first_step_time({**said, "resumed_at": True}, 60, 1000.0, 1010.7) == 1010.7
