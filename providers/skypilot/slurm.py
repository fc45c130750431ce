"""A SkyPilot cluster on on-prem Slurm, reached through the login node that ``infra``
names (``slurm/<login>``, with ``~/.slurm/config``): a command put into the cluster's
allocation, the allocation's state (squeue), and what a lost one leaves on the shared
folders. Nothing here imports SkyPilot."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable
from typing import Any

# The ssh configuration SkyPilot's Slurm support reads, naming each login node.
SLURM_SSH_CONFIG = "~/.slurm/config"


def on_slurm(info: dict[str, Any]) -> bool:
    """Is the cluster (its ClusterHandle.info) on Slurm?"""
    return str(info.get("infra", "")).startswith("slurm/")


def login_argv(infra: str, command: str) -> list[str]:
    """ssh to the login node of ``infra`` (``slurm/<login>``), running ``command`` there."""
    return [
        "ssh",
        "-F",
        os.path.expanduser(SLURM_SSH_CONFIG),
        "-o",
        "BatchMode=yes",
        infra.split("/", 1)[1],
        command,
    ]


def in_allocation(name: str, command: str, node: int = 0) -> str:
    """``command`` as the login node runs it inside the allocation named ``name``: with
    ``srun --overlap`` (as SkyPilot's own command runner does; ``--relative`` picks the
    node), with HOME the cluster's folder where SkyPilot synced the project; an allocation
    that is gone ends it with status 97."""
    inner = f'export HOME="$SKY_CLUSTER_HOME"; {command}'
    return (
        f"name={shlex.quote(name)}; "
        'id=$(squeue -h -u "$(id -un)" --name="$name" -o %i | head -n1); '
        '[ -n "$id" ] || { echo "no Slurm allocation named $name" >&2; exit 97; }; '
        'SKY_CLUSTER_HOME="$HOME/.sky_clusters/$name" '
        f'exec srun --unbuffered --overlap --jobid="$id" --nodes=1 --ntasks=1 '
        f"{f'--relative={int(node)} ' if node else ''}bash -c {shlex.quote(inner)}"
    )


def allocation_running(info: dict[str, Any]) -> bool | None:
    """On Slurm: is the cluster's allocation RUNNING? None when not Slurm or unknown."""
    name = info.get("name_on_cloud")
    if not on_slurm(info) or not name:
        return None
    argv = login_argv(str(info["infra"]), f'squeue -h -u "$(id -un)" --name={shlex.quote(str(name))} -t RUNNING -o %i')
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return bool(out.stdout.strip())


def _on_login(info: dict[str, Any], command: str, timeout: float) -> subprocess.CompletedProcess[str] | str:
    """``command`` run on the login node of the cluster's Slurm; why not, when it could not be."""
    try:
        return subprocess.run(
            login_argv(str(info["infra"]), command),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot reach the login node of {info['infra']}: {exc}"


def cancel_allocation(info: dict[str, Any], wait_s: float = 60.0, graceful: bool = False) -> str | None:
    """Cancel the cluster's allocation as a lost one goes (chaos kill_region): SIGKILL to
    every process of it (its batch script too, not the TERM and grace of a plain
    ``scancel``: a region lost does not finish its upload), then the job cancelled; None
    once Slurm lists it no more, else why not (one line). Through the login node.
    ``graceful``: a plain ``scancel`` (SIGTERM to every process of the job, SIGKILL after
    Slurm's KillWait), as an admin or a preempting partition cancels; None once sent."""
    name = info.get("name_on_cloud")
    if not on_slurm(info) or not name:
        return "only a Slurm allocation can be cancelled from here (scancel)"
    who = f'-u "$(id -un)" --name={shlex.quote(str(name))}'
    command = (
        f"scancel {who}"
        if graceful
        else f"scancel --signal=KILL --full {who}; scancel {who}; "
        f'for _ in $(seq {max(1, int(wait_s * 2))}); do [ -z "$(squeue -h {who} -o %i)" ] && exit 0; sleep 0.5; done; '
        "exit 3"
    )
    done = _on_login(info, command, wait_s + 30)
    if isinstance(done, str):
        return done
    if done.returncode == 3 and not graceful:
        return f"the allocation {name} was still listed by squeue {wait_s:g}s after scancel"
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"scancel of {name} failed: exit {done.returncode}: {tail}"
    return None


# Run in a step of its own on each node of the allocation: SIGSTOP or SIGCONT ($1) to
# every process of the job there (its cgroup names the job), this step's own excepted
# (theirs is the very same cgroup as this shell's).
# ``scancel --signal`` reaches only the processes of live steps and the batch script, not
# Ray's daemons and workers, which outlive the step that started them.
_SIGNAL_JOB = r"""
sig=$1; n=0; mine=$(cat /proc/$$/cgroup)
for d in /proc/[0-9]*; do
  cg=$(cat "$d/cgroup" 2>/dev/null) || continue
  [ "$cg" = "$mine" ] && continue
  case "$cg" in
    *"/job_${SLURM_JOB_ID}/"*) kill -"$sig" "${d#/proc/}" 2>/dev/null && n=$((n + 1)) ;;
  esac
done
echo "$n"
"""


def signal_allocation(info: dict[str, Any], sig: str) -> str | None:
    """``sig`` (STOP, CONT) to every process of the cluster's allocation on each of its
    nodes (chaos hang_region, partition_region); None once sent, else why not (one line).
    Through the login node, in a step of its own (``srun --overlap``)."""
    name = info.get("name_on_cloud")
    if not on_slurm(info) or not name:
        return "only a Slurm allocation can be signalled from here (scancel --signal)"
    if sig not in ("STOP", "CONT"):
        raise ValueError(f"signal {sig!r}: expected STOP or CONT")
    who = f'-u "$(id -un)" --name={shlex.quote(str(name))}'
    command = (
        f'id=$(squeue -h {who} -t RUNNING -o %i | head -n1); [ -n "$id" ] || exit 3; '
        'nodes=$(squeue -h -j "$id" -o %D); '
        'exec srun --overlap --jobid="$id" --nodes="$nodes" --ntasks-per-node=1 '
        f"bash -c {shlex.quote(_SIGNAL_JOB)} signal-job {sig}"
    )
    done = _on_login(info, command, 30)
    if isinstance(done, str):
        return done
    if done.returncode == 3:
        return f"no running allocation {name} to send SIG{sig}"
    counts = [int(w) for w in done.stdout.split() if w.isdigit()]
    if done.returncode != 0 or not counts:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"SIG{sig} to the allocation {name} failed: exit {done.returncode}: {tail}"
    if not sum(counts):
        return f"the allocation {name} has no process to send SIG{sig}"
    return None


def sweep(info: dict[str, Any], say: Callable[[str], None], runtime: bool = True) -> None:
    """What an allocation leaves on a Slurm cluster's shared folders: our node folder,
    and (``runtime``) SkyPilot's per-cluster folders, which ``sky.down`` leaves behind
    when the allocation was lost (scancel). Best effort, through the login node."""
    if not on_slurm(info):
        return
    paths = [str(info.get("node_dir", ""))]
    name = info.get("name_on_cloud")
    if name and runtime:
        paths += [f"~/.sky_clusters/{name}", f"/tmp/{name}"]
    paths = [p for p in paths if p and p not in ("/", "~")]
    if not paths:
        return
    infra = str(info["infra"])
    try:
        subprocess.run(
            login_argv(infra, "rm -rf " + " ".join(paths)), capture_output=True, timeout=30, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        say(f"could not clean {', '.join(paths)} on {infra.split('/', 1)[1]}: {exc}")
