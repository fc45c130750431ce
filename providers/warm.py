"""``python -m providers.warm MODULE...``: an interpreter that imports ahead, then runs
the ``python -m`` command it is handed, in its own process.

A runtime driver spends its first 3-4 s of a core importing Ray Train and torch, and a
local cluster's ``ray start`` leaves a core idle for much of its 6 s. The local provider
starts this process beside ``ray start``: it imports the modules named on its command
line while the cluster comes up, then waits for one line on stdin,
``{"module": M, "args": [...], "env": {...}, "log": PATH}``. It sends its output to PATH
(appended), adds ``env`` to its environment and runs M as ``python -m M ARGS`` would:
the runtime keeps this process's pid, session and exit code. End of stdin without a
line is a cluster that went without a runtime: exit 0.

SIGTERM stays blocked while the modules import: threads they start (torch starts one)
inherit the mask, so a preemption notice reaches whichever thread the runtime waits
for it on, never the default action in another. A SIGTERM that came before the order
means stop: the order is not run.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import signal
import sys
from dataclasses import dataclass

EXIT_BAD_ORDER = 2
EXIT_TERMINATED = 128 + signal.SIGTERM


@dataclass(frozen=True)
class Order:
    module: str
    args: list[str]
    env: dict[str, str]
    log: str


def parse_order(line: str) -> Order:
    """The one line the provider writes; ValueError naming what is wrong."""
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"order is not JSON: {exc.msg}") from None
    if not isinstance(raw, dict) or set(raw) != {"module", "args", "env", "log"}:
        raise ValueError("order must be an object with exactly: module, args, env, log")
    module, args, env, log = raw["module"], raw["args"], raw["env"], raw["log"]
    if not isinstance(module, str) or not module.replace(".", "").replace("_", "").isalnum():
        raise ValueError("order.module must be a dotted module name")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError("order.args must be a list of strings")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError("order.env must map strings to strings")
    if not isinstance(log, str) or not os.path.isabs(log):
        raise ValueError("order.log must be an absolute path")
    return Order(module, list(args), dict(env), log)


def main(preload: list[str]) -> int:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # the runtime imports it again and reports its own error
            pass
    line = sys.stdin.readline()
    if not line:
        return 0
    if signal.SIGTERM in signal.sigpending():
        return EXIT_TERMINATED
    try:
        order = parse_order(line)
    except ValueError as exc:
        print(f"providers.warm: {exc}", file=sys.stderr)
        return EXIT_BAD_ORDER
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(order.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.environ.update(order.env)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    sys.argv = [order.module, *order.args]  # runpy puts the module's path in argv[0]
    runpy.run_module(order.module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
