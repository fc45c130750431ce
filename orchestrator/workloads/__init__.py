"""Built-in workloads, keyed by the name ``job.workload`` uses."""

from __future__ import annotations

from orchestrator.workloads.base import Workload


def get_workload(name: str) -> type[Workload]:
    from orchestrator.workloads.digits import Digits
    from orchestrator.workloads.synthetic import Synthetic

    known: dict[str, type[Workload]] = {"digits": Digits, "synthetic": Synthetic}
    if name not in known:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(known)}")
    return known[name]


WORKLOADS = ("digits", "synthetic")
