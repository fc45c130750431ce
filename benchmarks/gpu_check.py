"""Train ``job=gpt`` on one GPU and check what only a GPU can show.

Run it on any machine with an NVIDIA GPU, CUDA torch and this project installed:

    python benchmarks/gpu_check.py [--steps 300] [--kill-at 160]

Two runs of the local provider, each region a Ray cluster that offers the GPU
(``cloud.regions.<r>.num_gpus=1``), one worker with ``trainer.gpus_per_worker=1``
and ``trainer.autocast=auto`` (bf16 where the GPU has it):

1. uninterrupted: the worker trained on ``cuda`` (its ``runtime.train_started`` event says
   where the model and batches live), NVML telemetry saw the GPU busy and its
   memory used, and the held-out loss fell;
2. the region killed at ``--kill-at`` (SIGKILL, the GPU process included): the run
   fails over to the second region's cluster on the same GPU and must end with
   exactly the weights of run 1 (deterministic kernels: see ``worker_device``).

Prints the figures (steps/s, GPU utilisation and memory, eval loss, RTO) and
exits 0 when every check holds, 1 when one does not, 2 when there is no GPU.
``--json PATH`` writes the same figures flattened (see ``flat_figures``), and with
no GPU ``{"gpu": null, "checks_held": null}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import orchestrate, temp_home, write_json

REGIONS = ("local-a", "local-b")


def overrides(steps: int) -> list[str]:
    return [
        "job=gpt",
        f"job.steps={steps}",
        "trainer.workers=1",
        "trainer.gpus_per_worker=1",
        "trainer.autocast=auto",
        f"cloud.candidates=[{','.join(REGIONS)}]",
        *(f"cloud.regions.{r}.num_gpus=1" for r in REGIONS),
        "recovery.region_cooldown_s=0",
    ]


def checks(base: dict[str, Any], base_journal: list[dict[str, Any]], faulted: dict[str, Any] | None) -> list[str]:
    """What failed, one line each (empty: all held). Pure: the tests drive it with records."""
    failed = []
    devices = {e.get("device") for e in base_journal if e["type"] == "runtime.train_started"}
    if not devices or not all(str(d).startswith("cuda") for d in devices):
        failed.append(f"the worker trained on {sorted(map(str, devices))}, expected cuda")
    gpu = (base.get("telemetry") or {}).get("gpu") or []
    if not gpu:
        failed.append(f"telemetry saw no GPU: {(base.get('telemetry') or {}).get('gpu_absent_reason')}")
    elif max(d["utilization_peak_percent"] for d in gpu) <= 0 or max(d["memory_peak_bytes"] for d in gpu) <= 0:
        failed.append(f"telemetry saw the GPU idle: {gpu}")
    if not base.get("metrics", {}).get("eval_loss", 99.0) < 5.0:  # untrained: about ln(256) = 5.55
        failed.append(f"eval loss did not fall: {base.get('metrics')}")
    if faulted is not None:
        if faulted.get("status") != "SUCCEEDED":
            failed.append(f"the faulted run ended {faulted.get('status')}: {faulted.get('reason')}")
        elif faulted.get("weights_sha256") != base.get("weights_sha256"):
            failed.append("the resumed run's weights differ from the uninterrupted run's")
    return failed


def flat_figures(figures: dict[str, Any], failed: list[str]) -> dict[str, Any]:
    """``figures`` (as printed) as flat JSON values: the per-GPU lists become their
    peak (``gpu_utilization_mean_percent``, ``gpu_memory_peak_mb``), the per-incident
    RTOs ``rto_s`` (the first incident's) and ``incidents``; with ``checks_failed``
    and ``checks_held``. Pure: the tests drive it with records."""
    out = {k: v for k, v in figures.items() if not isinstance(v, list)}
    for key in ("gpu_utilization_mean_percent", "gpu_memory_peak_mb"):
        values = figures.get(key) or []
        out[key] = max(values) if values else None
    rtos = figures.get("rto_s") or []
    out["rto_s"] = rtos[0] if rtos else None
    out["incidents"] = len(rtos)
    out["checks_failed"] = len(failed)
    out["checks_held"] = not failed
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--kill-at", type=int, default=160)
    ap.add_argument("--json", metavar="PATH", help="write the figures and the verdict there (flat keys)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU on this machine (torch.cuda.is_available() is false); run it where one is")
        write_json(args.json, {"gpu": None, "checks_held": None})
        return 2
    home = temp_home()
    base, journal = orchestrate(home, "gpu-base", *overrides(args.steps))
    faulted, _ = orchestrate(
        home, "gpu-kill", *overrides(args.steps), f"chaos.faults=[{{kind:kill_region,at_step:{args.kill_at}}}]"
    )
    gpu = (base.get("telemetry") or {}).get("gpu") or []
    figures = {
        "gpu": torch.cuda.get_device_name(0),
        "steps_per_s": base.get("train_steps_per_s"),
        "eval_loss": base.get("metrics", {}).get("eval_loss"),
        "gpu_utilization_mean_percent": [d["utilization_mean_percent"] for d in gpu],
        "gpu_memory_peak_mb": [round(d["memory_peak_bytes"] / 1e6) for d in gpu],
        "exact_after_kill_region": faulted.get("weights_sha256") == base.get("weights_sha256"),
        "rto_s": [i.get("rto_s") for i in faulted.get("incidents", [])],
    }
    print(json.dumps(figures, indent=1))
    failed = checks(base, journal, faulted)
    for line in failed:
        print(f"FAILED: {line}")
    print("gpu_check: all checks held" if not failed else f"gpu_check: {len(failed)} check(s) failed")
    write_json(args.json, {"steps": args.steps, "kill_at": args.kill_at, **flat_figures(figures, failed)})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
