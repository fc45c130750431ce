"""The run in Weights & Biases: one W&B run per orchestrator run (its id journaled, taken
up again with ``resume="allow"``), its files under the run folder's ``tracking/``.

W&B has no child runs: a search's trials are series of the run itself, each against its
own iterations (``trials/<trial_id>/<metric>`` over ``trials/<trial_id>/iteration``).
Every series is plotted against the training's step (``orchestrator/step``), not W&B's
own count of log calls. WANDB_API_KEY is read from the environment by W&B itself.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.config.schema import Config
from orchestrator.tracking.series import Point
from orchestrator.tracking.sinks import Started, missing

STEP = "orchestrator/step"
MAX_TAG = 64  # W&B's limit on a tag
_ARTIFACT_NAME = re.compile(r"[^A-Za-z0-9_.-]")


class WandbSink:
    def __init__(self, cfg: Config, run_id: str, run_dir: str) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise missing("wandb", exc) from exc
        self.wandb = wandb
        t = cfg.tracking
        self.project = t.project or cfg.job.name
        self.entity = t.entity
        self.name = t.run_name or run_id
        self.mode = str(t.mode)
        self.user_tags = [f"{k}:{v}"[:MAX_TAG] for k, v in t.tags.items()]
        self.run_id = run_id
        self.dir = os.path.join(run_dir, "tracking")
        self.run: Any = None
        self.trials: dict[str, str] = {}
        self.records: dict[int, dict[str, Any]] = {}

    def start(self, known: str | None, params: Mapping[str, str], tags: Mapping[str, str]) -> Started:
        os.makedirs(self.dir, exist_ok=True)
        rid = known or self.wandb.util.generate_id()
        self.run = self.wandb.init(
            project=self.project,
            entity=self.entity,
            id=rid,
            name=self.name,
            group=self.run_id,
            job_type="run",
            dir=self.dir,
            # Params once, when the run is made: a resume keeps the first attempt's config.
            config=None if known else dict(params),
            tags=self.user_tags,
            resume="allow",
            reinit="create_new",
            settings=self.wandb.Settings(mode=self.mode, console="off", silent=True, x_disable_stats=True),
        )
        self.run.define_metric(STEP)
        self.run.define_metric("*", step_metric=STEP)
        self.run.summary.update(dict(tags))
        return Started(rid, known is not None)

    def child(self, trial: str, known: str | None, params: Mapping[str, str]) -> Started:
        prefix = f"trials/{trial}"
        self.run.define_metric(f"{prefix}/iteration")
        self.run.define_metric(f"{prefix}/*", step_metric=f"{prefix}/iteration")
        self.run.summary[f"{prefix}/config"] = dict(params)
        self.trials[trial] = prefix
        return Started(f"{self.run.id}/{trial}", known is not None)

    def written(self, child: str) -> dict[str, int]:
        return {}  # W&B's files say nothing back offline: the listener's written.json does

    def metrics(self, child: str, points: Sequence[Point]) -> None:
        steps: dict[int, dict[str, float]] = {}
        for p in points:
            steps.setdefault(p.step, {})[p.key] = p.value
        prefix = self.trials.get(child)
        for step in sorted(steps):
            if prefix is None:
                self.run.log({**steps[step], STEP: step})
            else:
                values = {f"{prefix}/{k}": v for k, v in steps[step].items()}
                self.run.log({**values, f"{prefix}/iteration": step})

    def tags(self, tags: Mapping[str, str]) -> None:
        self.run.summary.update(dict(tags))

    def incident(self, number: int, record: Mapping[str, Any], line: str) -> None:
        self.records[number] = dict(record)
        self.run.summary.update(
            {
                f"orchestrator.incident.{number:03d}": line,
                "orchestrator.incidents": len(self.records),
                "orchestrator.incident_records": [self.records[n] for n in sorted(self.records)],
            }
        )

    def checkpoint(self, url: str, step: int | None, sha256: str | None) -> None:
        self.run.summary["orchestrator.final_checkpoint"] = url
        name = _ARTIFACT_NAME.sub("_", f"{self.run_id}-final-checkpoint")
        artifact = self.wandb.Artifact(name, type="checkpoint", metadata={"url": url, "step": step, "sha256": sha256})
        # A reference: W&B records where the checkpoint is and never reads or uploads it.
        artifact.add_reference(url, name="checkpoint", checksum=False)
        self.run.log_artifact(artifact)

    def finish(self, status: str) -> None:
        if self.run is not None:
            self.run.finish(exit_code=0 if status == "FINISHED" else 1)
