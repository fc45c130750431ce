"""A search's snapshot as data: what a resumed search believes, checked before it is used.

A snapshot is one ``experiment.tar`` in an ordinary checkpoint (signed manifest,
replication, fencing, retention as for training). It holds no pickle, so nothing
read back from a store can run code, even a snapshot this run signed:

- ``search.json``: every trial's record (status, last iteration and metrics, the
  iteration of its newest checkpoint, its weights' hash) and ASHA's rungs.
- ``checkpoints`` in ``search.json``: which checkpoint of each trial that may still run
  the snapshot stands on (a ``TrialRef``); the checkpoints themselves are ordinary signed
  checkpoints of their own in the store (``trial_store``), read back when a search
  resumes. Their files: ``{model,optimizer,state}.pt`` (and ``rng-<rank>.pt`` per rank
  of a multi-worker trial), tensors read with ``torch.load(weights_only=True)``; or,
  for a search over a Ray Train function (``job.train_func``), its newest reported
  checkpoint folder as ``files/<path>`` (handed back to the function through
  ``ray.train.get_checkpoint()``, never opened here) and ``func.json``, the number of
  reports it stands after.
- A snapshot written before trials had checkpoints of their own holds those files in
  the archive instead, as ``trials/<trial_id>/<file>``; it is read as it was written.

Tune's own experiment folder (``tuner.pkl``, the searcher's and the trials' pickled
state) stays on the cluster's scratch and never travels: a resumed search is a new
Tune experiment over the trials that remain (see ``resume_plan``), each trial
starting from its checkpoint here. The trials' values are not read from the
snapshot either: both sides list them from the run's config (hpo.sample_configs),
and a record whose values differ from the list is refused.
"""

from __future__ import annotations

import io
import json
import math
import re
import tarfile
from dataclasses import dataclass, field
from typing import Any

from orchestrator.hpo import ERROR, TERMINATED, AshaRungs, TrialRecord, trial_key
from orchestrator.hpo.pbt import Exploit, read_exploits
from orchestrator.hpo.replay import ReplayError, check_events
from orchestrator.hpo.space import MAX_TRIALS, in_space, parse_distribution
from orchestrator.runtime.search.trial_store import TrialRef, TrialRefError
from orchestrator.wire.sections import METRIC_NAME
from recovery.manifest import ManifestError, check_member_name

FORMAT = "orchestrator.search/1"
# The one file of a search's checkpoint in the store.
ARCHIVE = "experiment.tar"
STATE = "search.json"
CHECKPOINT_FILES = ("model.pt", "optimizer.pt", "state.pt")
# A multi-worker trial's (hpo.trial.workers > 1) checkpoint also holds each rank's RNG states.
RNG_FILE = re.compile(r"rng-(\d{1,4})\.pt")
# A train function's trial checkpoint: its folder's files under FUNC_FILES, and FUNC_STATE.
FUNC_STATE = "func.json"
FUNC_FILES = "files/"
MAX_FUNC_FILES = 4096
MAX_FUNC_STATE_BYTES = 4096
STATE_KEYS = frozenset({"format", "trials", "rungs", "searcher", "pbt", "checkpoints"})
STATUSES = frozenset({"PENDING", "RUNNING", "PAUSED", TERMINATED, ERROR})
# A trial's metrics: the numbers its workload's evaluate() returned, by name (METRIC_NAME),
# reported to Tune at the top level (for its scheduler) and together under METRICS_KEY.
METRICS_KEY = "eval_metrics"
MAX_METRICS = 32
MAX_STATE_BYTES = 16 << 20
MAX_FILE_BYTES = 4 << 30
MAX_ERROR = 2000
_TRIAL = re.compile(r"trial_(\d{5})")
_MEMBER = re.compile(r"trials/(trial_\d{5})/(.+)")
_WORKLOAD_PART = re.compile("|".join([*(re.escape(f) for f in CHECKPOINT_FILES), RNG_FILE.pattern]))
_SHA = re.compile(r"[0-9a-f]{64}")
RECORD_KEYS = frozenset(TrialRecord("x", TERMINATED).to_json())
# A record written before checkpoint_sha256 was one of its fields reads as one without it.
OLD_RECORD_KEYS = RECORD_KEYS - {"checkpoint_sha256"}


class SnapshotError(ValueError):
    """A snapshot that is not what this run's search writes; the message is one line."""


@dataclass
class SearchSnapshot:
    trials: list[TrialRecord]
    # ASHA's recorded values per rung, as AshaRungs.to_json; None for a FIFO search.
    rungs: dict[str, dict[str, float]] | None = None
    # trial_id -> {file name: bytes}: the newest checkpoint of each trial that may still run.
    checkpoints: dict[str, dict[str, bytes]] = field(default_factory=dict)
    # A searcher that proposes trials (hpo.search_alg=optuna): its log (orchestrator.hpo.replay).
    searcher: list[list[Any]] | None = None
    # Population-based training's decisions so far (orchestrator.hpo.pbt), in order.
    exploits: list[Exploit] | None = None
    # trial_id -> its checkpoint in the store (trial_store): the trials of ``checkpoints``
    # a snapshot names instead of holding; a restore reads them into ``checkpoints``.
    refs: dict[str, TrialRef] = field(default_factory=dict)
    # trial_id -> the region whose store a restore read its named checkpoint from.
    read_from: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Expected:
    """What the run's config says of a search's trials: a random search's list of values
    (``listed``), or, for trials a searcher proposes, how many and from which ``space``."""

    count: int
    listed: list[dict[str, Any]] | None = None
    space: dict[str, str] | None = None
    # Trials proposed by a searcher whose log the snapshot holds (hpo.search_alg=optuna).
    proposes: bool = False
    # Trials whose values PBT explored (any of the space's), its decisions in the snapshot.
    evolves: bool = False
    # Trials of a train function (job.train_func): their checkpoints are its folders.
    functions: bool = False

    def holds(self, index: int, config: Any) -> bool:
        if self.listed is not None and (config == self.listed[index] or not self.evolves):
            return bool(config == self.listed[index])
        space = self.space or {}
        if not isinstance(config, dict) or set(config) != set(space):
            return False
        return all(in_space(*parse_distribution(k, space[k]), v) for k, v in config.items())


def part_name_ok(name: str) -> bool:
    """A file a trial's checkpoint may hold: a workload trial's (CHECKPOINT_FILES, RNG
    files) or a train function's (FUNC_STATE, FUNC_FILES + a path inside its folder)."""
    if _WORKLOAD_PART.fullmatch(name) or name == FUNC_STATE:
        return True
    if not name.startswith(FUNC_FILES):
        return False
    try:
        check_member_name(name[len(FUNC_FILES) :])
    except ManifestError:
        return False
    return True


def func_parts(iteration: int, files: dict[str, bytes]) -> dict[str, bytes]:
    """A train function's trial checkpoint: its folder's ``files`` (relative POSIX paths)
    after ``iteration`` reports."""
    parts = {FUNC_FILES + name: data for name, data in files.items()}
    parts[FUNC_STATE] = json.dumps({"iteration": iteration}).encode()
    return parts


def is_func_parts(parts: dict[str, bytes]) -> bool:
    return FUNC_STATE in parts


def func_iteration(parts: dict[str, bytes]) -> int:
    """The reports a train function's checkpoint stands after; SnapshotError if FUNC_STATE
    is not ``{"iteration": N}`` (N >= 1)."""
    raw = parts.get(FUNC_STATE, b"")
    try:
        state = json.loads(raw) if len(raw) <= MAX_FUNC_STATE_BYTES else None
    except (UnicodeDecodeError, ValueError):
        state = None
    it = state.get("iteration") if isinstance(state, dict) and set(state) == {"iteration"} else None
    if isinstance(it, bool) or not isinstance(it, int) or it < 1:
        raise SnapshotError(f'{FUNC_STATE} is not {{"iteration": N}} with N >= 1')
    return it


def func_files(parts: dict[str, bytes]) -> dict[str, bytes]:
    """The function's own files of ``parts``, by their path in its folder."""
    return {name[len(FUNC_FILES) :]: data for name, data in parts.items() if name.startswith(FUNC_FILES)}


def checkpoint_names(parts: dict[str, bytes]) -> list[str]:
    """A trial checkpoint's files: CHECKPOINT_FILES, then its ranks' RNG files by rank (a
    train function's: FUNC_STATE, then its files by path)."""
    if is_func_parts(parts):
        return [FUNC_STATE, *sorted(n for n in parts if n.startswith(FUNC_FILES))]
    rngs = sorted((n for n in parts if RNG_FILE.fullmatch(n)), key=lambda n: int(n[4:-3]))
    return [*CHECKPOINT_FILES, *rngs]


def pack(snapshot: SearchSnapshot) -> bytes:
    state: dict[str, Any] = {
        "format": FORMAT,
        "trials": [t.to_json() for t in snapshot.trials],
        "rungs": snapshot.rungs,
    }
    if snapshot.searcher is not None:
        state["searcher"] = snapshot.searcher
    if snapshot.exploits is not None:
        state["pbt"] = [e.to_json() for e in snapshot.exploits]
    if snapshot.refs:
        state["checkpoints"] = {t: ref.to_json() for t, ref in sorted(snapshot.refs.items())}
    files = {STATE: json.dumps(state, sort_keys=True).encode()}
    for trial_id, parts in sorted(snapshot.checkpoints.items()):
        for name in checkpoint_names(parts):
            files[f"trials/{trial_id}/{name}"] = parts[name]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def unpack(
    data: bytes, configs: list[dict[str, Any]] | Expected, max_t: int, rungs: list[int] | None
) -> SearchSnapshot:
    """The snapshot in ``data``, checked against the search the run's config describes
    (``configs`` from hpo.sample_configs, or an Expected; ``rungs`` from hpo.asha_rungs or
    None for FIFO). A searcher's log is checked in shape here, and by its replay later.
    Raises SnapshotError naming what is wrong; reads members in memory, extracts nothing."""
    expected = configs if isinstance(configs, Expected) else Expected(len(configs), configs)
    try:
        members = _members(data)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise SnapshotError(f"experiment.tar is not a tar archive ({type(exc).__name__})") from None
    if STATE not in members:
        raise SnapshotError(f"experiment.tar has no {STATE}")
    try:
        state = json.loads(members.pop(STATE))
    except (UnicodeDecodeError, ValueError):
        raise SnapshotError(f"{STATE} is not JSON") from None
    if not isinstance(state, dict) or not {"format", "trials", "rungs"} <= set(state) <= STATE_KEYS:
        raise SnapshotError(f"{STATE} is not an object of format, trials, rungs (and a searcher's log)")
    if state["format"] != FORMAT:
        raise SnapshotError(f"{STATE} has format {str(state['format'])[:40]!r}; expected {FORMAT!r}")
    if not isinstance(state["trials"], list):
        raise SnapshotError(f"{STATE}: trials is not a list")
    trials = [_record(raw, i, expected, max_t) for i, raw in enumerate(state["trials"])]
    ids = [t.trial_id for t in trials]
    if len(set(ids)) != len(ids):
        raise SnapshotError(f"{STATE} names a trial twice")
    by_id = {t.trial_id: t for t in trials}
    refs = _refs(state.get("checkpoints", {}), by_id, max_t)
    checkpoints = _checkpoints(members, by_id, expected.functions, set(refs))
    searcher = state.get("searcher")
    if (searcher is not None) != expected.proposes:
        raise SnapshotError(f"{STATE}: a searcher's log goes with a searcher that proposes trials, and only then")
    if searcher is not None:
        try:
            check_events(searcher, expected.count)
        except ReplayError as exc:
            raise SnapshotError(f"{STATE}: {exc}") from None
    exploits = None
    if ("pbt" in state) != expected.evolves:
        raise SnapshotError(f"{STATE}: PBT's decisions go with hpo.scheduler=pbt, and only then")
    if expected.evolves:
        try:
            exploits = read_exploits(state["pbt"], expected.space or {}, set(ids), max_t)
        except ValueError as exc:
            raise SnapshotError(f"{STATE}: {exc}") from None
    return SearchSnapshot(trials, _rungs(state["rungs"], rungs, set(ids)), checkpoints, searcher, exploits, refs)


def _refs(raw: Any, trials: dict[str, TrialRecord], max_t: int) -> dict[str, TrialRef]:
    """The trial checkpoints a snapshot names: each of a trial that has one at that iteration."""
    if not isinstance(raw, dict) or len(raw) > MAX_TRIALS:
        raise SnapshotError(f"{STATE}: checkpoints is not an object of at most {MAX_TRIALS} trials")
    out: dict[str, TrialRef] = {}
    for trial_id, value in raw.items():
        record = trials.get(trial_id)
        if record is None or record.checkpoint_iteration is None:
            raise SnapshotError(f"{STATE} names a checkpoint of {str(trial_id)[:40]}, which its records say has none")
        try:
            ref = TrialRef.from_json(value, max_t)
        except TrialRefError as exc:
            raise SnapshotError(f"{STATE}: the checkpoint of {trial_id} {exc}") from None
        if ref.iteration != record.checkpoint_iteration:
            raise SnapshotError(
                f"{STATE} names {trial_id}'s checkpoint at iteration {ref.iteration}; "
                f"its record says {record.checkpoint_iteration}"
            )
        out[trial_id] = ref
    return out


def _members(data: bytes) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar:
            name = member.name
            if not member.isfile():
                raise SnapshotError(f"experiment.tar holds {name[:80]!r}, which is not a plain file")
            match = _MEMBER.fullmatch(name)
            if name != STATE and (match is None or not part_name_ok(match.group(2))):
                raise SnapshotError(f"experiment.tar holds {name[:80]!r}, which a search snapshot never has")
            if name in out:
                raise SnapshotError(f"experiment.tar holds {name!r} twice")
            if len(out) > (MAX_FUNC_FILES + 1) * MAX_TRIALS:
                raise SnapshotError(f"experiment.tar holds more than {len(out)} files")
            if member.size > (MAX_STATE_BYTES if name == STATE else MAX_FILE_BYTES):
                raise SnapshotError(f"experiment.tar's {name!r} is too large ({member.size} bytes)")
            fh = tar.extractfile(member)
            assert fh is not None  # a plain file
            out[name] = fh.read()
    return out


def _record(raw: Any, i: int, expected: Expected, max_t: int) -> TrialRecord:
    where = f"{STATE}: trials[{i}]"
    if not isinstance(raw, dict) or set(raw) not in (RECORD_KEYS, OLD_RECORD_KEYS):
        raise SnapshotError(f"{where} is not a trial record (fields {', '.join(sorted(RECORD_KEYS))})")
    trial_id = raw["trial_id"]
    match = _TRIAL.fullmatch(trial_id) if isinstance(trial_id, str) else None
    if match is None or int(match.group(1)) >= expected.count:
        raise SnapshotError(f"{where}.trial_id is not one of this search's {expected.count} trials")
    if not expected.holds(int(match.group(1)), raw["config"]):
        raise SnapshotError(f"{where}.config differs from the values the run's config gives {trial_id}")
    if raw["status"] not in STATUSES:
        raise SnapshotError(f"{where}.status is not one of {', '.join(sorted(STATUSES))}")
    _iteration(raw["iteration"], f"{where}.iteration", 0, max_t)
    if raw["checkpoint_iteration"] is not None:
        _iteration(raw["checkpoint_iteration"], f"{where}.checkpoint_iteration", 1, max_t)
    metrics = raw["metrics"]
    if not isinstance(metrics, dict) or len(metrics) > MAX_METRICS:
        raise SnapshotError(f"{where}.metrics is not an object of at most {MAX_METRICS} metrics")
    for name, value in metrics.items():
        if not METRIC_NAME.fullmatch(name):
            raise SnapshotError(f"{where}.metrics has a name that is not a metric's ({name[:40]!r})")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SnapshotError(f"{where}.metrics.{name} is not a number")
    if raw["error"] is not None and not (isinstance(raw["error"], str) and len(raw["error"]) <= MAX_ERROR):
        raise SnapshotError(f"{where}.error is not a string of at most {MAX_ERROR} characters")
    for key in ("weights_sha256", "checkpoint_sha256"):
        sha = raw.get(key)
        if sha is not None and not (isinstance(sha, str) and _SHA.fullmatch(sha)):
            raise SnapshotError(f"{where}.{key} is not a sha256 in hex")
    return TrialRecord(**{**raw, "metrics": {k: float(v) for k, v in metrics.items()}})


def _iteration(value: Any, where: str, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SnapshotError(f"{where} is not an integer in [{low}, {high}]")


def _checkpoints(
    members: dict[str, bytes], trials: dict[str, TrialRecord], functions: bool, named: set[str]
) -> dict[str, dict[str, bytes]]:
    """The trial checkpoints the archive holds (a snapshot of before trials had their
    own), checked; with those ``named`` in the store, one for every trial that has one."""
    out: dict[str, dict[str, bytes]] = {}
    for name, data in members.items():
        match = _MEMBER.fullmatch(name)
        assert match is not None  # _members let only these through
        out.setdefault(match.group(1), {})[match.group(2)] = data
    for trial_id, parts in out.items():
        record = trials.get(trial_id)
        if record is None or record.checkpoint_iteration is None:
            raise SnapshotError(f"experiment.tar has a checkpoint for {trial_id}, which its records say has none")
        if trial_id in named:
            raise SnapshotError(f"experiment.tar holds a checkpoint of {trial_id} and names another in the store")
        check_parts(trial_id, parts, record.checkpoint_iteration, functions, "experiment.tar's checkpoint")
    for record in trials.values():
        has = record.trial_id in out or record.trial_id in named
        if record.status != TERMINATED and record.checkpoint_iteration is not None and not has:
            raise SnapshotError(f"{STATE} says {record.trial_id} has a checkpoint, and the snapshot names none")
    return out


def check_parts(trial_id: str, parts: dict[str, bytes], iteration: int, functions: bool, what: str) -> None:
    """A trial checkpoint's files are those of this search's trials (a workload's state,
    or a train function's folder), standing at ``iteration`` for a function's; else
    SnapshotError naming ``what`` (one line)."""
    where = f"{what} of {trial_id}"
    if any(not part_name_ok(n) for n in parts):
        raise SnapshotError(f"{where} holds a file a trial checkpoint never has")
    if is_func_parts(parts) != functions:
        ours = "a train function's folder" if functions else "a workload's state"
        raise SnapshotError(f"{where} is not {ours}, which this search's are")
    if functions:
        _check_func_parts(where, parts, iteration)
        return
    if any(n.startswith(FUNC_FILES) for n in parts):
        raise SnapshotError(f"{where} has a function's files without {FUNC_STATE}")
    if not set(CHECKPOINT_FILES) <= set(parts):
        raise SnapshotError(f"{where} lacks some of {', '.join(CHECKPOINT_FILES)}")
    ranks = sorted(int(m.group(1)) for n in parts if (m := RNG_FILE.fullmatch(n)))
    if ranks and ranks != list(range(len(ranks))):
        raise SnapshotError(f"{where} has RNG states of ranks {ranks[:8]}")


def _check_func_parts(where: str, parts: dict[str, bytes], iteration: int) -> None:
    """A train function's checkpoint: its state, its own files alone, and no more of them
    than a folder of MAX_FUNC_FILES; standing where its record says."""
    if any(_WORKLOAD_PART.fullmatch(n) for n in parts):
        raise SnapshotError(f"{where} mixes a function's files and a workload's")
    if len(parts) - 1 > MAX_FUNC_FILES:
        raise SnapshotError(f"{where} has more than {MAX_FUNC_FILES} files")
    try:
        at = func_iteration(parts)
    except SnapshotError as exc:
        raise SnapshotError(f"{where}: {exc}") from None
    if at != iteration:
        raise SnapshotError(f"{where} stands after {at} reports; its record says {iteration}")


def _rungs(raw: Any, expected: list[int] | None, ids: set[str]) -> dict[str, dict[str, float]] | None:
    if expected is None:
        if raw is not None:
            raise SnapshotError(f"{STATE} has ASHA rungs, and the run's search is not ASHA")
        return None
    if not isinstance(raw, dict) or set(raw) != {str(r) for r in expected}:
        raise SnapshotError(f"{STATE}: rungs are not the run's ({', '.join(map(str, expected)) or 'none'})")
    out: dict[str, dict[str, float]] = {}
    for rung, values in raw.items():
        if not isinstance(values, dict) or not set(values) <= ids:
            raise SnapshotError(f"{STATE}: rung {rung} names trials the snapshot does not have")
        for value in values.values():
            if isinstance(value, bool) or not isinstance(value, int | float) or math.isinf(value):
                raise SnapshotError(f"{STATE}: rung {rung} holds a value that is not a number")
        out[rung] = {k: float(v) for k, v in values.items()}
    return out


@dataclass
class ResumePlan:
    """What a resumed search does with each trial of its snapshot."""

    # Indexes (hpo.sample_configs) of the trials this attempt runs, ascending.
    run: list[int]
    # Finished trials carried as they are: not run again, in the result as recorded.
    carried: list[TrialRecord]
    # trial_id -> the record to go on from (its checkpoint in ``checkpoints``, if any).
    restored: dict[str, TrialRecord]
    checkpoints: dict[str, dict[str, bytes]]


def resume_plan(
    snapshot: SearchSnapshot | None, num_trials: int, resume_errored: bool, restart_errored: bool
) -> ResumePlan:
    """Finished trials stay finished; an errored one goes on from its checkpoint
    (``resume_errored``), starts over (``restart_errored``) or stays errored; every other
    trial, started or not, goes on from its newest checkpoint or starts."""
    if snapshot is None:
        return ResumePlan(list(range(num_trials)), [], {}, {})
    records = {t.trial_id: t for t in snapshot.trials}
    run: list[int] = []
    carried: list[TrialRecord] = []
    restored: dict[str, TrialRecord] = {}
    checkpoints: dict[str, dict[str, bytes]] = {}
    for index in range(num_trials):
        record = records.get(trial_key(index))
        if record is None:
            run.append(index)
            continue
        if record.status == TERMINATED or (record.status == ERROR and not (resume_errored or restart_errored)):
            carried.append(record)
            continue
        run.append(index)
        if record.status == ERROR and restart_errored:
            continue
        restored[record.trial_id] = record
        if record.trial_id in snapshot.checkpoints:
            checkpoints[record.trial_id] = snapshot.checkpoints[record.trial_id]
    return ResumePlan(run, carried, restored, checkpoints)


def rungs_from(snapshot: SearchSnapshot | None, asha: AshaRungs) -> AshaRungs:
    if snapshot is not None and snapshot.rungs is not None:
        asha.load(snapshot.rungs)
    return asha
