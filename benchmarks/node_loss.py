"""Recovery inside a region against the cold failover of a whole region, on this machine.

Five runs of the digits job in a region of two Ray nodes (one CPU each, one worker
on each; the ``standby`` run's region has a third), each losing something at the same step:

- ``kill_worker``: the worker on node 1 (SIGKILL); Ray Train restarts the group in place;
- ``replaced``: ``kill_node`` (every process of worker node 1, SIGKILL); the node is
  replaced in place and the worker group restarts at its full world (exact weights);
- ``standby`` (a spare node; the mode and its JSON keys keep that name): ``kill_node``
  of a node that runs a worker, in a region of three nodes: the third is a spare node
  (its spare imported), where the lost worker goes on at once while the lost node is
  replaced in the background;
- ``elastic``: the same fault with ``recovery.node_replace_timeout_s=0`` and
  ``trainer.min_workers=1``: the group restarts at once on the node that is left;
- ``cold failover``: ``kill_region``: the run fails over to a new cluster in the next region.

Each one's recovery time is its incident's: the fault to the first step after the
restore. Goals, as ratios to the cold failover's: a replaced node at most 0.4 (with a
spare node too), a killed worker and an elastic restart at most 0.25 each. ``survivor_restarts`` counts
the workers the fault did not touch whose process was started again by the recovery
(from the pids each ``train_started`` journals, rank by rank; goal 0): a recovery that
restarts the whole world restarts every survivor.

``--job gpt --strategy fsdp --modes kill_worker`` measures the same under FSDP (a sharded
model's survivors load their own shards from memory; the replacement streams its own
from the store); the cold failover is always run, as the reference.

    python benchmarks/node_loss.py [--steps 3000] [--kill-at 1000] [--job digits]
                                   [--strategy ddp] [--modes kill_worker,replaced,...] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import orchestrate, temp_home, write_json

TWO_NODES = ("cloud.regions.local-a.nodes=2", "cloud.regions.local-a.num_cpus=1")
THREE_NODES = ("cloud.regions.local-a.nodes=3", "cloud.regions.local-a.num_cpus=1")
# Each mode's region (TWO_NODES unless named here).
LAYOUT = {"standby": THREE_NODES}
# mode: (the fault, its extra overrides)
MODES: dict[str, tuple[str, tuple[str, ...]]] = {
    "kill_worker": ("kill_worker", ()),
    "replaced": ("kill_node", ()),
    "standby": ("kill_node", ()),
    "elastic": ("kill_node", ("recovery.node_replace_timeout_s=0", "trainer.min_workers=1")),
    "cold failover": ("kill_region", ()),
}
INCIDENT = {"kill_worker": "worker_lost", "kill_node": "node_lost", "kill_region": "cluster_lost"}
# Workers each fault takes, in this layout (one worker per node); a region takes them all.
LOST = {"kill_worker": 1, "kill_node": 1}
# Each mode's RTO over the cold failover's, at most (the cold failover is the reference).
GOALS = {"kill_worker": 0.25, "replaced": 0.4, "standby": 0.4, "elastic": 0.25}


def incident_of(result: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [i for i in result["incidents"] if i["kind"] == kind]
    if len(found) != 1 or found[0].get("rto_s") is None:
        raise SystemExit(f"expected one recovered {kind} incident, got {result['incidents']}")
    return found[0]


def row_of(result: dict[str, Any], fault: str, journal: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A run's row: what its one incident of ``fault``'s kind says (``incident_of``), and
    with its journal how many survivors the recovery restarted. The chaos tier reads its
    own runs with it, so the fields and events it needs stay in result.json and the journal."""
    inc = incident_of(result, INCIDENT[fault])
    return {
        "rto_s": inc["rto_s"],
        "detected_after_s": inc["detected_after_s"],
        "lost_steps": inc["lost_steps"],
        "replace_s": inc.get("replace_s"),
        "world_after": inc.get("world_size_after") or 2,
        "weights": result["weights_sha256"][:16],
        "survivor_restarts": None
        if journal is None or fault not in LOST
        else survivor_restarts(journal, inc, LOST[fault]),
    }


def survivor_restarts(journal: list[dict[str, Any]], incident: dict[str, Any], lost: int) -> int:
    """Survivors of ``incident`` whose process the recovery started again: of the pids of
    the world training before the fault (the last ``train_started`` before it), those not
    in the world after it (the first ``train_started`` after it), less the
    ``lost`` workers the fault took. SystemExit when either world's pids are missing."""

    def pids(e: dict[str, Any]) -> list[int]:
        found = e.get("worker_pids")
        if not isinstance(found, list):
            raise SystemExit("a train_started without worker_pids: this run's runtime does not journal them")
        return [int(p) for p in found]

    started = [e for e in journal if e.get("type") == "runtime.train_started"]
    failed = float(incident["failed_at"])
    before = [e for e in started if float(e.get("time", e["ts"])) < failed]
    after = [e for e in started if float(e.get("time", e["ts"])) >= failed]
    if not before or not after:
        raise SystemExit("no world before or after the incident in the journal")
    gone = set(pids(before[-1])) - set(pids(after[0]))
    return max(0, len(gone) - lost)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--kill-at", type=int, default=1000)
    ap.add_argument("--job", default="digits", help="the job config (gpt for --strategy fsdp)")
    ap.add_argument("--strategy", default="ddp", choices=("ddp", "fsdp"), help="trainer.strategy")
    ap.add_argument("--modes", default=",".join(m for m in MODES if m != "cold failover"), help="comma-separated")
    ap.add_argument("--json", metavar="PATH", help="write the figures and ratios there (flat keys)")
    args = ap.parse_args()
    modes = chosen_modes(args.modes)
    home = temp_home()
    rows: dict[str, dict[str, Any]] = {}
    for mode in modes:
        fault, extra = MODES[mode]
        run_id = "node-loss-" + mode.replace(" ", "-")
        faults = f"chaos.faults=[{{kind:{fault},at_step:{args.kill_at}}}]"
        layout = LAYOUT.get(mode, TWO_NODES)
        job = (f"job={args.job}", f"trainer.strategy={args.strategy}")
        result, journal = orchestrate(home, run_id, *job, f"job.steps={args.steps}", *layout, faults, *extra)
        rows[mode] = row_of(result, fault, journal)
        print(f"{mode}: rto {rows[mode]['rto_s']:.2f}s, weights {rows[mode]['weights']}...", flush=True)
    fig = figures(rows)
    print()
    print(table(rows))
    for mode, goal in GOALS.items():
        if mode in rows:
            ratio = fig[RATIO_KEYS[mode]]
            met = "met" if ratio <= goal else "not met"
            print(f"{mode}: RTO / cold failover RTO = {ratio:.2f} (goal <= {goal}: {met})")
    print(f"survivors restarted (goal 0): {fig['survivor_restarts']}")
    for mode in EXACT:
        if mode in rows:
            print(f"{mode} ends with the cold failover's weights: {fig[mode + '_weights_exact']}")
    write_json(args.json, {"job": args.job, "strategy": args.strategy, **fig})


def chosen_modes(text: str) -> list[str]:
    """The modes ``--modes`` names, in MODES' order, the cold failover always last (the
    reference); SystemExit naming an unknown one."""
    asked = {m.strip() for m in text.split(",") if m.strip()}
    unknown = sorted(asked - set(MODES))
    if unknown:
        raise SystemExit(f"--modes: unknown {', '.join(unknown)}; expected some of {', '.join(MODES)}")
    return [m for m in MODES if m in asked or m == "cold failover"]


RATIO_KEYS = {
    "kill_worker": "kill_worker_ratio",
    "replaced": "node_replaced_ratio",
    "standby": "node_standby_ratio",
    "elastic": "node_elastic_ratio",
}
# The modes that keep their world, and so end with the cold failover's weights.
EXACT = ("kill_worker", "replaced", "standby")


def table(rows: dict[str, dict[str, Any]]) -> str:
    cold = rows["cold failover"]["rto_s"]
    heads = f"{'mode':<15}{'RTO':>8}{'detect':>8}{'replace':>9}{'lost':>6}{'world':>7}{'/ cold':>8}"
    lines = [heads + f"{'survivors restarted':>21}"]
    for mode, r in rows.items():
        replace = f"{r['replace_s']:.2f}s" if r["replace_s"] is not None else "-"
        survivors = "-" if r["survivor_restarts"] is None else str(r["survivor_restarts"])
        lines.append(
            f"{mode:<15}{r['rto_s']:>7.2f}s{r['detected_after_s']:>7.2f}s{replace:>9}{r['lost_steps']:>6}"
            f"{r['world_after']:>7}{r['rto_s'] / cold:>8.2f}{survivors:>21}"
        )
    return "\n".join(lines)


def figures(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The flat figures: each mode's RTO and its ratio to the cold failover's, the
    survivors each in-region recovery restarted (``survivor_restarts``: the most of
    the modes that keep their world; goal 0), and whether those (kill_worker, replaced,
    standby) end with the cold failover's weights. Pure."""
    cold = rows["cold failover"]["rto_s"]
    survivors = [rows[m]["survivor_restarts"] for m in EXACT if m in rows]
    cold_weights = rows["cold failover"]["weights"]
    names = {
        "kill_worker": "kill_worker",
        "replaced": "node_replaced",
        "standby": "node_standby",
        "elastic": "node_elastic",
    }
    return {
        "rto_cold_s": cold,
        "rto_cold_failover_s": cold,
        **{f"rto_{names[m]}_s": rows[m]["rto_s"] for m in names if m in rows},
        **({"node_replace_s": rows["replaced"]["replace_s"]} if "replaced" in rows else {}),
        **{key: round(rows[mode]["rto_s"] / cold, 3) for mode, key in RATIO_KEYS.items() if mode in rows},
        "survivor_restarts": None if not survivors or None in survivors else max(survivors),
        **{f"survivor_restarts_{m.replace(' ', '_')}": rows[m]["survivor_restarts"] for m in GOALS if m in rows},
        **{f"{m}_weights_exact": rows[m]["weights"] == cold_weights for m in EXACT if m in rows},
    }


if __name__ == "__main__":
    main()
