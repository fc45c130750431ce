"""``python -m orchestrator.workloads``: construct a job's workload in a process of its own
(the controller's stays free of the user's constructor, its imports and its time) and say
on stdout, as one JSON object, whether it raised: ``{}``, or ``{"key": ..., "message": ...}``.
Stdin: ``{"job": <job section, plain>, "path": <sys.path to import it from>}``."""

from __future__ import annotations

import json
import sys


def main() -> int:
    request = json.load(sys.stdin)
    sys.path[:] = [*request["path"], *(p for p in sys.path if p not in request["path"])]
    from orchestrator.workloads import construct_problem

    answer, sys.stdout = sys.stdout, sys.stderr  # what the constructor prints is not the answer
    try:
        problem = construct_problem(request["job"])
    finally:
        sys.stdout = answer
    out = {} if problem is None else {"key": problem.key, "message": str(problem).split(": ", 1)[1]}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
