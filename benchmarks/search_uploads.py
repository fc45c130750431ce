"""What a search's snapshots put into the store, against snapshots that hold their trials' weights.

Each trial's checkpoints are checkpoints of their own in the store, and a snapshot names
them; so a snapshot uploads only the trials that moved since the last one (and a finished
trial's final weights, once). Before, every snapshot was one archive holding the newest
checkpoint of every trial that might still run. One search, a snapshot at every search
step (``hpo.snapshot_interval_s=0``, the most a search takes), journals per snapshot
(``runtime.search_snapshot``) the bytes it put into the store, of them the finished
trials' final weights (which the old archives dropped), and the bytes an archive holding
its running trials' checkpoints would have held. The figure, ``uploaded_ratio``: what the
snapshots uploaded to resume from (all but the final weights) over what archives holding
the trials would have.

    python benchmarks/search_uploads.py [--job digits_hpo] [--trials 8] [--scheduler asha] [--concurrent 4] [--max-t 6]
        [--steps-per-iteration 200] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import orchestrate, temp_home, write_json

EVENT = "runtime.search_snapshot"


def figures(journal: list[dict[str, Any]]) -> dict[str, Any]:
    """The search's snapshots, summed from its journal: how many, the trial checkpoints they
    uploaded, the bytes they put into the store (of them the finished trials' final weights)
    and the bytes archives holding their running trials would have; ``uploaded_ratio``: the
    bytes uploaded to resume from over the last (None without a snapshot)."""
    snaps = [e for e in journal if e.get("type") == EVENT]
    uploaded = sum(int(e["bytes_uploaded"]) for e in snaps)
    final = sum(int(e.get("bytes_final", 0)) for e in snaps)
    held = sum(int(e["bytes_if_held"]) for e in snaps)
    return {
        "snapshots": len(snaps),
        "trial_checkpoints_uploaded": sum(int(e["trials_uploaded"]) for e in snaps),
        "bytes_uploaded": uploaded,
        "bytes_final": final,
        "bytes_if_held": held,
        "uploaded_ratio": round((uploaded - final) / held, 4) if held else None,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default="digits_hpo", help="the search's job config (conf/job/NAME.yaml)")
    ap.add_argument("--trials", type=int, default=8, help="hpo.num_samples")
    ap.add_argument("--scheduler", default="asha", help="hpo.scheduler: asha (stops trials early), fifo or pbt")
    ap.add_argument("--concurrent", type=int, default=4, help="hpo.max_concurrent (half a CPU each)")
    ap.add_argument("--max-t", type=int, default=6, help="hpo.max_t: iterations per trial")
    ap.add_argument(
        "--steps-per-iteration", type=int, default=200, help="hpo.steps_per_iteration: long enough that trials overlap"
    )
    ap.add_argument("--json", metavar="PATH", help="write the figures there (flat keys)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    overrides = [
        f"job={args.job}",
        f"hpo.num_samples={args.trials}",
        f"hpo.scheduler={args.scheduler}",
        f"hpo.max_t={args.max_t}",
        f"hpo.steps_per_iteration={args.steps_per_iteration}",
        f"hpo.max_concurrent={args.concurrent}",
        "hpo.cpus_per_trial=0.5",
        "hpo.snapshot_interval_s=0",
    ]
    result, journal = orchestrate(temp_home(), "search-uploads", *overrides)
    assert result["status"] == "SUCCEEDED", result
    out = figures(journal)
    print(
        f"{out['snapshots']} snapshots, {out['trial_checkpoints_uploaded']} trial checkpoints uploaded: "
        f"{out['bytes_uploaded'] / 1e6:.2f} MB into the store ({out['bytes_final'] / 1e6:.2f} MB of them the "
        f"finished trials' final weights), against {out['bytes_if_held'] / 1e6:.2f} MB for snapshots holding "
        f"their trials: resume points uploaded / held = {out['uploaded_ratio']}"
    )
    write_json(
        args.json,
        {
            "job": args.job,
            "scheduler": args.scheduler,
            "trials": args.trials,
            "concurrent": args.concurrent,
            "max_t": args.max_t,
            **out,
        },
    )


if __name__ == "__main__":
    main()
