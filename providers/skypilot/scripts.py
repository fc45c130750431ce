"""The shell a SkyPilot cluster's nodes run: the task's run command (Ray on every node),
and what the controller runs on the head over ssh (the ready probe, a remote kill, the
runtime started detached and followed). Text and exit codes only; nothing runs here."""

from __future__ import annotations

import shlex

# Set-up lines for job.code_dir, after the region's own set-up: its requirements.txt into
# the runtime's Python, only when the file names something (a file of comments needs no
# pip, which a shared read-only environment such as on-prem's may not have).
CODE_SETUP = r"""req=$(eval echo "$ORCH_CODE_DIR")/requirements.txt
if [ -f "$req" ] && grep -qvE '^[[:space:]]*(#|$)' "$req"; then
  "$(eval echo "$ORCH_PYTHON")" -m pip install -q -r "$req"
fi"""
# Shell that puts $ORCH_CODE_DIR (a "~/..." path, expanded on the node) first on PYTHONPATH.
CODE_PATH = (
    'if [ -n "${ORCH_CODE_DIR:-}" ]; then '
    'export PYTHONPATH="$(eval echo "$ORCH_CODE_DIR")${PYTHONPATH:+:$PYTHONPATH}"; fi'
)

# How long the head waits for every node of a multi-node cluster to join its Ray (and a
# worker node for the head to answer) before it gives up with a line saying which joined.
NODE_JOIN_TIMEOUT_S = 120.0
# launch() waits this long for the head's ray-ready: its Ray, then every node's.
READY_TIMEOUT_S = NODE_JOIN_TIMEOUT_S + 60.0

# The task's run command: Ray on every node, then stay up until sky down. The head
# writes $ORCH_NODE_DIR/ray-ready once every node has joined (launch() waits for it), or
# $ORCH_NODE_DIR/ray-failed with the reason. What a real cluster alone knows comes from
# the environment: SkyPilot's SKYPILOT_NODE_RANK / _NODE_IPS / _NUM_NODES, and
# ORCH_RAY_NODE_ARGS (more `ray start` flags; tests running several nodes on one machine
# give each its own ports) and ORCH_NODE_JOIN_S.
RUN_SCRIPT = r"""set -euo pipefail
mkdir -p "$ORCH_NODE_DIR/scratch"
rm -f "$ORCH_NODE_DIR/ray-ready" "$ORCH_NODE_DIR/ray-failed"
# Token auth: RAY_AUTH_TOKEN is the cluster's own, a SkyPilot secret (never in the task's
# envs), on every node: the workers join the head with it.
export RAY_AUTH_MODE=token RAY_USAGE_STATS_ENABLED=0 RAY_TMPDIR="$ORCH_NODE_DIR"
nodes=${SKYPILOT_NUM_NODES:-1}
rank=${SKYPILOT_NODE_RANK:-0}
if [ "$nodes" = 1 ]; then
  # One node: everything on loopback.
  export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
  ip=127.0.0.1; head=127.0.0.1
else
  # SkyPilot's convention: the nodes' IPs one a line in rank order, the head's first.
  ip=$(echo "$SKYPILOT_NODE_IPS" | sed -n "$((rank + 1))p")
  head=$(echo "$SKYPILOT_NODE_IPS" | head -n1)
fi
py=$(eval echo "$ORCH_PYTHON")
join_s=${ORCH_NODE_JOIN_S:-__JOIN_S__}
# job.code_dir: Ray's workers inherit the raylet's environment, so the user's code is
# importable in every worker.
__CODE_PATH__
common=(--node-ip-address="$ip" --num-cpus="$ORCH_NUM_CPUS" --num-gpus="${SKYPILOT_NUM_GPUS_PER_NODE:-0}"
        --disable-usage-stats)
if [ -n "${ORCH_RAY_NODE_ARGS:-}" ]; then
  read -r -a more <<< "$ORCH_RAY_NODE_ARGS"
  common+=("${more[@]}")
fi
# providers.raystart (the synced project, this command's working directory): Ray's own
# `ray start`, without its Serve import, Ray Client's server or, with no dashboard, the
# dashboard's API server: about 3 s of a launch, and of every failover, on the nodes.
ray_start=("$py" -m providers.raystart start --no-ray-client)
if [ "$rank" = 0 ]; then
  dashboard=(--include-dashboard=false --no-api-server)
  if [ -n "${ORCH_DASHBOARD_PORT:-}" ]; then
    # cloud.dashboard: on the head's loopback only (ssh -L reaches it), and the cluster's
    # token, which the dashboard asks for, where the node's user alone reads it.
    dashboard=(--include-dashboard=true --dashboard-host=127.0.0.1 --dashboard-port="$ORCH_DASHBOARD_PORT")
    (umask 077; printf '%s' "${RAY_AUTH_TOKEN:-}" > "$ORCH_NODE_DIR/auth_token")
  fi
  "${ray_start[@]}" --head --port="$ORCH_RAY_PORT" "${dashboard[@]}" \
    --temp-dir="$ORCH_NODE_DIR/ray" "${common[@]}"
  if [ "$nodes" != 1 ]; then
    # Every node in before the runtime starts: a worker group placed on part of the
    # cluster would be a smaller run than the one asked for.
    "$py" -m providers.skypilot.nodes wait "$head:$ORCH_RAY_PORT" "$nodes" "$join_s" \
      --failed="$ORCH_NODE_DIR/ray-failed" --key="cloud.regions.${ORCH_REGION:-<name>}.nodes"
  fi
  touch "$ORCH_NODE_DIR/ray-ready"
else
  # As SkyPilot's own Ray template: wait for the head to answer, then join it.
  "$py" -m providers.skypilot.nodes wait "$head:$ORCH_RAY_PORT" 1 "$join_s"
  # --block: this node's Ray lives as long as this command (sky down ends it with the
  # job). When it ends (a Ray process of the node died), the command stays: a node's
  # command that fails fails SkyPilot's job, which cancels every node's, the head's
  # included; the run's runtime sees the node gone and goes on with the workers that fit.
  status=0
  "${ray_start[@]}" --address="$head:$ORCH_RAY_PORT" --block "${common[@]}" || status=$?
  echo "orchestrator: Ray on node $rank ($ip) ended with status $status; it stays out of the cluster" >&2
fi
exec sleep infinity
""".replace("__CODE_PATH__", CODE_PATH).replace("__JOIN_S__", f"{NODE_JOIN_TIMEOUT_S:g}")


# kill_script's status when the pid is none of the cluster's Ray processes.
NOT_OURS = 3


def kill_script(pid: int, node_dir: str) -> str:
    """The shell on the head that SIGKILLs ``pid`` only if it is one of this cluster's
    Ray processes: they all carry RAY_TMPDIR=<the cluster's node dir> (RUN_SCRIPT sets it
    before ``ray start``; workers inherit the raylet's environment). Exit NOT_OURS else."""
    wanted = shlex.quote(f"RAY_TMPDIR={node_dir}")
    return (
        f"p={int(pid)}; tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qxF {wanted} "
        f"|| exit {NOT_OURS}; kill -9 $p"
    )


# The head's probe when its run command wrote ray-failed (some nodes never joined).
NODES_MISSING = 4


def ready_probe(node_dir: str, wait_s: float = 0.0) -> str:
    """The shell on the head that exits 0 once ray-ready is there, NODES_MISSING with the
    head's line when ray-failed is (RUN_SCRIPT), 1 while neither is. ``wait_s``: look
    every 0.2 s for that long first, in one connection (each ssh into a Slurm allocation
    costs most of a second, and the cluster is ready the moment the file is)."""
    ready, failed = shlex.quote(f"{node_dir}/ray-ready"), shlex.quote(f"{node_dir}/ray-failed")
    look = f"test -f {ready} && exit 0; test -f {failed} && {{ cat {failed}; exit {NODES_MISSING}; }}"
    rounds = int(wait_s / 0.2)
    if rounds <= 0:
        return f"{look}; exit 1"
    return f"for _ in $(seq {rounds}); do {look}; sleep 0.2; done; {look}; exit 1"


# The follower's status when the runtime has ended without leaving its status (killed
# together with the shell that waits for it).
RUNTIME_GONE = 98


def runtime_files(remote_spec: str) -> tuple[str, str, str]:
    """(pid file, status file, log) of the runtime started with ``remote_spec``, on the head."""
    stem = remote_spec.removesuffix(".json")
    return f"{stem}.pid", f"{stem}.status", f"{stem}.log"


def start_script(command: str, remote_spec: str) -> str:
    """The shell on the head that starts the runtime (``command``) so that it outlives the
    connection starting it: under a shell in a session of its own that waits for it, its
    output to a log on the node, its pid and then its exit status to files there; then
    this connection follows it (``follow_script``) from the log's start."""
    pid, status, log = (shlex.quote(p) for p in runtime_files(remote_spec))
    waiter = (
        f"{command} < /dev/null >> {log} 2>&1 & echo $! > {pid}.tmp; mv {pid}.tmp {pid}; "
        f"wait $!; echo $? > {status}.tmp; mv {status}.tmp {status}"
    )
    start = f": >> {log}; setsid -w bash -c {shlex.quote(waiter)} < /dev/null > /dev/null 2>&1 & "
    return start + follow_script(remote_spec, from_start=True)


def follow_script(remote_spec: str, from_start: bool = False) -> str:
    """The shell on the head that follows the runtime started with ``remote_spec``: its
    log streamed (from the start, or from now on for a connection re-attached) until it
    ends, then its exit status as this shell's; RUNTIME_GONE when it left none. The
    runtime's own pid is followed: its waiting shell reaps it at once."""
    pid, status, log = (shlex.quote(p) for p in runtime_files(remote_spec))
    return (
        f"set +e; for _ in $(seq 30); do [ -s {pid} ] && break; sleep 0.1; done; "
        f"p=$(cat {pid} 2>/dev/null) || exit {RUNTIME_GONE}; "
        f'tail -n {"+1" if from_start else "0"} -s 0.5 --pid="$p" -f {log}; '
        f'for _ in $(seq 10); do [ -s {status} ] && exit "$(cat {status})"; sleep 0.1; done; '
        f"exit {RUNTIME_GONE}"
    )


def runtime_status(code: int) -> int:
    """The runtime's status from its follower's: a signal's 128+N (the waiting shell's
    way of saying it) as -N, the way the local provider reports it."""
    return -(code - 128) if 128 < code <= 128 + 64 else code
