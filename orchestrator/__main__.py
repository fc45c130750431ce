"""``python -m orchestrator [GROUP=OPTION ...] [KEY=VALUE ...]``."""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time

USAGE = """usage: python -m orchestrator [GROUP=OPTION ...] [KEY=VALUE ...]

  job=digits                 the workload (conf/job/)
  cloud=local                where it may run; regions in failover order (conf/cloud/)
  recovery=default           failure detection and budgets (conf/recovery/)
  chaos=none                 faults to inject, or chaos.faults='[{kind:kill_region,at_step:60}]'
  action=run|status          run a job (default), or show run_id=<id>
  run_id=<id>  home=<dir>    name the run; where journals, results and local stores live

examples:
  python -m orchestrator job=digits
  python -m orchestrator job=digits trainer.workers=1 checkpoint.interval_steps=50
  python -m orchestrator action=status run_id=digits-20261130-120000-ab12
"""


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help", "help") for a in args):
        print(USAGE)
        return 0
    from orchestrator.compose import compose
    from orchestrator.config import ConfigError

    try:
        cfg = compose(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if cfg.action == "status":
        return _status(cfg.home_path, str(cfg.run_id))
    return _run(cfg)


def _status(home: str, run_id: str) -> int:
    from orchestrator.status import render, run_ids, summarize

    s = summarize(os.path.join(home, "runs", run_id))
    if s is None:
        known = run_ids(home)
        hint = f"; runs under {home}: {', '.join(known[-5:])}" if known else f"; no runs under {home}"
        print(f"error: run_id: no run named {run_id!r}{hint}", file=sys.stderr)
        return 2
    print(render(run_id, s))
    return 0


def _run(cfg: object) -> int:
    from orchestrator.config import Config
    from orchestrator.controller import Controller
    from orchestrator.preflight import PreflightError, preflight
    from orchestrator.result import read_result
    from orchestrator.status import render, summarize
    from providers.registry import UnknownProvider, get_provider

    assert isinstance(cfg, Config)
    run_id = cfg.run_id or f"{cfg.job.name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    run_dir = os.path.join(cfg.home_path, "runs", run_id)
    done = read_result(run_dir)
    if done is not None:
        print(
            f"error: run_id: run {run_id!r} already finished ({done['status']}); "
            "omit run_id for a new run, or pick another name",
            file=sys.stderr,
        )
        return 2
    try:
        provider = get_provider(cfg.cloud.provider)
        preflight(cfg)
    except UnknownProvider as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    except PreflightError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"run {run_id}: job {cfg.job.name} on {cfg.cloud.name} ({', '.join(cfg.candidate_regions())})",
        file=sys.stderr,
    )
    signal.signal(signal.SIGTERM, _raise_interrupt)
    result = Controller(cfg, provider, run_id).run()
    summary = summarize(run_dir)
    print(render(run_id, summary) if summary else result)
    print(f"result: {os.path.join(run_dir, 'result.json')}")
    return 0 if result["status"] == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main())
