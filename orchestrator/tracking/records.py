"""What the run becomes in a tracker: its params, its points, its incidents and its end,
each decided by a pure function from what the run reports (the TensorBoard writer's
readings of the same sources: orchestrator/metrics/board.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from orchestrator.config.schema import DISPLAY_KEYS, Config
from orchestrator.metrics.board import Scalar, final_records, loss_records, progress_records, trial_records
from orchestrator.runstate.events import IncidentFields
from orchestrator.tracking.series import Point
from orchestrator.wire.codec import to_plain
from recovery.storage import credential_name, find_secret

# Left out of the params: who is notified (its targets may carry a token, and are kept in
# notify.secret alone), and what shapes a command's output rather than the run.
LEFT_OUT = ("notify", *DISPLAY_KEYS)
MAX_PARAM = 500  # characters of a param's value: MLflow keeps 6000, W&B's config shows fewer
HIDDEN = "(hidden)"
# The tracker's run of the orchestrator's run, and its children: a search's trials.
RUN = ""


def params(cfg: Config) -> dict[str, str]:
    """The composed config, flattened to dotted keys. A value under a credential's name, or
    holding a URL with user information, is never one (validate refuses them; this is the
    last guard before a tracker shows it to everyone who sees the run)."""
    plain = to_plain(cfg)
    out: dict[str, str] = {}
    for key in LEFT_OUT:
        plain.pop(key, None)
    _flatten(plain, "", out)
    return out


def _flatten(value: Any, prefix: str, out: dict[str, str]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
        return
    last = prefix.rsplit(".", 1)[-1]
    if credential_name(last) and value not in (None, False, True):
        out[prefix] = HIDDEN
    elif find_secret({last: value}) is not None:
        out[prefix] = HIDDEN
    else:
        text = str(value) if not isinstance(value, str) else value
        out[prefix] = text if len(text) <= MAX_PARAM else text[: MAX_PARAM - 3] + "..."


def _points(records: Iterable[Any], at: float) -> tuple[Point, ...]:
    return tuple(Point(r.tag, r.step, r.value, at) for r in records if isinstance(r, Scalar))


def loss_points(points: list[Any], at: float) -> tuple[Point, ...]:
    """The runtime's loss series ([step, loss] pairs): ``train/loss``."""
    return _points(loss_records(points), at)


def progress_points(prog: dict[str, Any], at: float) -> tuple[Point, ...]:
    """A progress report: steps/s, telemetry, a train function's metrics, a search's counts."""
    return _points(progress_records(prog), at)


def final_points(final: dict[str, Any], at: float) -> tuple[Point, ...]:
    """The final report's metrics at the final step (``final/<name>``)."""
    return _points(final_records(final), at)


def trial_points(fields: dict[str, Any], at: float) -> tuple[str, tuple[Point, ...]] | None:
    """A trial's iteration (a ``trial_result``): its trial id and its metrics by name, at
    the iteration; None for a report that is no trial's."""
    records = trial_records(fields)
    if not records:
        return None
    trial = str(fields["trial_id"])
    return trial, tuple(
        Point(r.tag.removeprefix("search/"), r.step, r.value, at) for r in records if isinstance(r, Scalar)
    )


def incident_key(incident: IncidentFields) -> tuple[Any, ...]:
    """What names one incident across its records (board._incidents keeps the latest of each)."""
    return incident.kind, incident.generation, incident.failed_at


INCIDENT_FIELDS = (
    "kind",
    "from_region",
    "to_region",
    "last_step",
    "restored_step",
    "lost_steps",
    "detected_after_s",
    "rto_s",
    "generation",
    "failed_at",
    "node",
)


def incident_record(incident: IncidentFields) -> dict[str, Any]:
    """An incident as the tracker keeps it: what happened, where, what it cost."""
    record = {name: getattr(incident, name, None) for name in INCIDENT_FIELDS}
    return {k: v for k, v in record.items() if v is not None}


def incident_line(incident: IncidentFields) -> str:
    """One line for a tag: ``kill_region: a -> b, restored step 40, 12 steps lost, RTO 21.3 s``."""
    parts = [f"{incident.kind}: {incident.from_region} -> {incident.to_region or '?'}"]
    if incident.restored_step is not None:
        parts.append(f"restored step {incident.restored_step}")
    if incident.lost_steps is not None:
        parts.append(f"{incident.lost_steps} steps lost")
    if incident.rto_s is not None:
        parts.append(f"RTO {incident.rto_s:.1f} s")
    return ", ".join(parts)


# result.json's fields that become the tracker run's summary at the end (each a scalar).
RESULT_FIELDS = ("status", "reason", "region", "final_step", "attempts", "train_steps_per_s", "weights_sha256")


def result_summary(result: dict[str, Any]) -> dict[str, str]:
    """result.json's scalars as tags (``orchestrator.<field>``), the final checkpoint's
    location among them; what is null is left out."""
    out = {f"orchestrator.{k}": str(result[k]) for k in RESULT_FIELDS if result.get(k) is not None}
    if isinstance(result.get("final_checkpoint"), str):
        out["orchestrator.final_checkpoint"] = result["final_checkpoint"]
    sha = result.get("checkpoint_sha256")
    if isinstance(sha, str):
        out["orchestrator.checkpoint_sha256"] = sha
    goodput = result.get("goodput")
    if isinstance(goodput, dict) and isinstance(goodput.get("goodput"), int | float):
        out["orchestrator.goodput"] = f"{goodput['goodput']:.4f}"
    return out


# How the run's end reads in the trackers: MLflow's run statuses; W&B's exit code is 0 for
# FINISHED alone.
END_STATUS = {"SUCCEEDED": "FINISHED", "FAILED": "FAILED", "CANCELLED": "KILLED", "INTERRUPTED": "KILLED"}


def end_status(status: str | None) -> str:
    return END_STATUS.get(status or "", "FAILED")
