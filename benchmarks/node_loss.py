"""Node-loss recovery against the cold failover of a whole region, on this machine.

Three runs of the digits job in a region of two Ray nodes (one CPU each, one worker
on each), each losing something at the same step:

- ``replaced``: ``kill_node`` (every process of worker node 1, SIGKILL); the node is
  replaced in place and the worker group restarts at its full world (exact weights);
- ``elastic``: the same fault with ``recovery.node_replace_timeout_s=0`` and
  ``trainer.min_workers=1``: the group restarts at once on the node that is left;
- ``cold failover``: ``kill_region``: the run fails over to a new cluster in the next region.

Each one's recovery time is its incident's: the fault to the first step after the
restore. The goal: node-loss recovery at most half the cold failover's.

    python benchmarks/node_loss.py [--steps 3000] [--kill-at 1000] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import orchestrate, temp_home, write_json

TWO_NODES = ("cloud.regions.local-a.nodes=2", "cloud.regions.local-a.num_cpus=1")
# mode: (the fault, its extra overrides)
MODES: dict[str, tuple[str, tuple[str, ...]]] = {
    "replaced": ("kill_node", ()),
    "elastic": ("kill_node", ("recovery.node_replace_timeout_s=0", "trainer.min_workers=1")),
    "cold failover": ("kill_region", ()),
}


def incident_of(result: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [i for i in result["incidents"] if i["kind"] == kind]
    if len(found) != 1 or found[0].get("rto_s") is None:
        raise SystemExit(f"expected one recovered {kind} incident, got {result['incidents']}")
    return found[0]


def row_of(result: dict[str, Any], fault: str) -> dict[str, Any]:
    """A run's row: what its one incident of ``fault``'s kind says (``incident_of``). The
    chaos tier reads its own runs with it, so the fields it needs stay in result.json."""
    inc = incident_of(result, "node_lost" if fault == "kill_node" else "cluster_lost")
    return {
        "rto_s": inc["rto_s"],
        "detected_after_s": inc["detected_after_s"],
        "lost_steps": inc["lost_steps"],
        "replace_s": inc.get("replace_s"),
        "world_after": inc.get("world_size_after") or 2,
        "weights": result["weights_sha256"][:16],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--kill-at", type=int, default=1000)
    ap.add_argument("--json", metavar="PATH", help="write the figures and ratios there (flat keys)")
    args = ap.parse_args()
    home = temp_home()
    rows: dict[str, dict[str, Any]] = {}
    for mode, (fault, extra) in MODES.items():
        run_id = "node-loss-" + mode.replace(" ", "-")
        faults = f"chaos.faults=[{{kind:{fault},at_step:{args.kill_at}}}]"
        result, _ = orchestrate(home, run_id, f"job.steps={args.steps}", *TWO_NODES, faults, *extra)
        rows[mode] = row_of(result, fault)
        print(f"{mode}: rto {rows[mode]['rto_s']:.2f}s, weights {rows[mode]['weights']}...", flush=True)
    cold = rows["cold failover"]["rto_s"]
    print()
    print(f"{'mode':<15}{'RTO':>8}{'detect':>8}{'replace':>9}{'lost':>6}{'world':>7}{'/ cold':>8}")
    for mode, r in rows.items():
        replace = f"{r['replace_s']:.2f}s" if r["replace_s"] is not None else "-"
        print(
            f"{mode:<15}{r['rto_s']:>7.2f}s{r['detected_after_s']:>7.2f}s{replace:>9}{r['lost_steps']:>6}"
            f"{r['world_after']:>7}{r['rto_s'] / cold:>8.2f}"
        )
    ratios = {mode: rows[mode]["rto_s"] / cold for mode in ("replaced", "elastic")}
    for mode, ratio in ratios.items():
        met = "met" if ratio <= 0.5 else "not met"
        print(f"{mode}: node-loss RTO / cold failover RTO = {ratio:.2f} (goal <= 0.5: {met})")
    same = rows["replaced"]["weights"] == rows["cold failover"]["weights"]
    print(f"replaced and cold failover end with the same weights: {same}")
    write_json(
        args.json,
        {
            "rto_cold_s": cold,
            "rto_node_replaced_s": rows["replaced"]["rto_s"],
            "rto_node_elastic_s": rows["elastic"]["rto_s"],
            "node_replace_s": rows["replaced"]["replace_s"],
            "node_replaced_ratio": round(ratios["replaced"], 3),
            "node_elastic_ratio": round(ratios["elastic"], 3),
            "replaced_weights_exact": same,
        },
    )


if __name__ == "__main__":
    main()
