"""Hostile command lines through ``python -m orchestrator``'s entry point, in-process.

Each case must end with exit status 2 and one stderr line starting ``error:`` that names
the key, with no traceback, within a few seconds, launching nothing (providers, the
controller, the supervisor, preflight and plan fail the test if called) and writing
nothing under the sandbox: home, the user's home (``~/.sky`` included) and the working
directory. tests/integration/orchestrator/test_main_hostile.py runs a handful of them as
the real process.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.__main__ import main
from orchestrator.config.checks import (
    MAX_COMMAND_CHARS,
    MAX_FAULTS,
    MAX_NESTING,
    MAX_NUMBER_DIGITS,
    MAX_RANGE_VALUES,
    MAX_SWEEP_RUNS,
    MAX_WORD_CHARS,
    MAX_WORDS,
)
from tests.support.sandbox import launch_nothing, tree

pytestmark = pytest.mark.unit

R = "cloud.regions.local-a"
# A refused command line answers within this many seconds of CPU (Hydra's compose is most
# of it). Its wall time is bounded only against a hang: the unit tier runs at a low
# priority beside the Ray tiers, where a second of CPU can take several on the clock.
FEW_SECONDS = 5.0
HANG_S = 60.0


def since(started: tuple[float, float]) -> tuple[float, float]:
    """The wall and CPU seconds since ``started``, a ``(time.monotonic(), time.process_time())``."""
    return time.monotonic() - started[0], time.process_time() - started[1]


def assert_quick(took: tuple[float, float]) -> None:
    """``took`` (``since``'s) is a few seconds of this process's CPU, and no hang."""
    wall, cpu = took
    assert cpu < FEW_SECONDS, f"took {cpu:.1f}s of CPU"
    assert wall < HANG_S, f"took {wall:.1f}s"


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for d in ("home", "user", "cwd"):
        (tmp_path / d).mkdir()
    launch_nothing(monkeypatch, tmp_path / "home", tmp_path / "user", tmp_path / "cwd")
    yield tmp_path


def refused(root: Path, args: list[str], capsys: pytest.CaptureFixture[str], names: str) -> str:
    """Run the CLI in-process; assert exit 2, one error line naming ``names``, no
    traceback, a few seconds at most, and nothing written under ``root``."""
    before = tree(root)
    started = time.monotonic(), time.process_time()
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    took = since(started)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert code == 2, (args[:3], out[-300:], err[-600:])
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err[:600]
    assert names in lines[0], lines[0]
    assert out == ""
    assert_quick(took)
    assert tree(root) == before, "something was written"
    assert not (root / "user" / ".sky").exists()
    return lines[0]


# --- the issue's cases, one each ----------------------------------------------------------------

FAULT = "{kind:preempt,at_step:5}"
ISSUE_CASES: list[tuple[list[str], str]] = [
    (["job.steps=" + "9" * 5000], "error: job.steps:"),
    (["job.params.x=" + "[" * 3000 + "]" * 3000], "error: job.params.x:"),
    (["job.params.x=" + "{a:" * 1000 + "1" + "}" * 1000], "error: job.params.x:"),
    (["-m", "job.seed=range(0,100000000)"], f"at most {MAX_RANGE_VALUES}"),
    (["-m", "job.seed=range(0,5000)", "job.steps=range(1,5001)"], f"at most {MAX_RANGE_VALUES}"),
    (["-m", "job.seed=range(0,100)", "job.steps=range(1,101)"], f"at most {MAX_SWEEP_RUNS}"),
    (["chaos.faults=[" + ",".join([FAULT] * 3000) + "]"], "error: "),
    (["chaos.faults=[" + ",".join([FAULT] * (MAX_FAULTS + 1)) + "]"], f"at most {MAX_FAULTS}"),
    (["trainer.cpus_per_worker=1e-300"], "error: trainer.cpus_per_worker:"),
    (["recovery.heartbeat_interval_s=1e-300"], "error: recovery.heartbeat_interval_s:"),
    (
        [f"+{R}.storage_options.s3_additional_kwargs.SSECustomerKey=x"],
        f"error: {R}.storage_options.s3_additional_kwargs.SSECustomerKey:",
    ),
    ([f"+{R}.storage_options.secretaccesskey=x"], f"error: {R}.storage_options.secretaccesskey:"),
    ([f"+{R}.storage_options.Passw0rd=x"], f"error: {R}.storage_options.Passw0rd:"),
    (["cloud=local", "cloud=aws"], "error: cloud:"),
    (["job={}"], "error: job:"),
    (["cloud.regions={}"], "error: cloud.regions:"),
    (["~action"], "error: action:"),
    (["home='/tmp/a::b'"], "error: home:"),
    ([f"{R}.store='simplecache::file:///tmp/x'"], f"error: {R}.store:"),
    ([f"{R}.store='s3://bucket/x/gs://other/y'"], f"error: {R}.store:"),
]


@pytest.mark.parametrize(("args", "names"), ISSUE_CASES, ids=[" ".join(a)[:50] for a, _ in ISSUE_CASES])
def test_each_hostile_case_of_the_issue_is_one_line_and_exit_2(
    sandbox: Path, capsys: pytest.CaptureFixture[str], args: list[str], names: str
) -> None:
    refused(sandbox, args, capsys, names)


# --- the fuzz: each concern over many keys and shapes --------------------------------------------

HUGE_INT = "9" * 5000
NUMBER_KEYS = ["job.steps", "job.seed", "job.batch_size", "trainer.workers", "checkpoint.interval_steps", "job.lr"]
NUMBERS = [
    HUGE_INT,
    "-" + HUGE_INT,
    "1" + "0" * 19,
    "9223372036854775808",
    "-9223372036854775809",
    "1_000_000_000_000_000_000_000",
    "0." + "1" * (MAX_NUMBER_DIGITS + 1),
    "1." + "0" * 40 + "1",
    "1e400",
    "-1e400",
    "1e-400",
    "1e99999999999",
]
NUMBER_CASES = [([f"{k}={v}"], f"error: {k}:") for k in NUMBER_KEYS for v in NUMBERS]
# Numbers nested in lists and mappings, and in a free-form key, are bounded the same.
NESTED_NUMBER_CASES = [
    ([f"job.params.{k}={shape.format(v)}"], f"error: job.params.{k}:")
    for k in ("x", "hidden")
    for shape in ("[{}]", "{{a:{}}}", "[1,[2,{}]]")
    for v in (HUGE_INT, "1e400", "0." + "3" * 30)
]

NESTING_KEYS = ["job.params.x", "chaos.faults", "cloud.regions", "hpo.search_space", "job.name", "+job.params.y"]
NESTING_SHAPES = (
    [("[" * n + "]" * n) for n in (MAX_NESTING + 1, 200, 3000)]
    + [("{a:" * n + "1" + "}" * n) for n in (MAX_NESTING + 1, 500)]
    + ["'" + "${" * 100 + "'"]
)
NESTING_CASES = [([f"{k}={s}"], f"error: {k.lstrip('+')}:") for k in NESTING_KEYS for s in NESTING_SHAPES]

LONG_CASES = [
    (["job.params.x='" + "a" * MAX_WORD_CHARS + "'"], "error: job.params.x:"),
    (["job.name=" + "a" * (MAX_WORD_CHARS + 1)], "error: job.name:"),
    (["job.params.x=1"] * (MAX_WORDS + 1), "error: command line:"),
    ([f"job.params.k{i}='{'a' * 4000}'" for i in range(MAX_COMMAND_CHARS // 4000 + 1)], "error: command line:"),
]

RANGE_CASES = [
    (["-m", f"{k}={fn}"], f"error: {k}:")
    for k in ("job.seed", "job.steps", "job.params.x")
    for fn in (
        "range(0,100000000)",
        "range(100000000)",
        f"range(0,{MAX_RANGE_VALUES + 1})",
        "range(0,1,0.0000001)",
        "range(start=0,stop=100000000)",
        "shuffle(range(0,100000000))",
        "sort(range(0,100000000))",
        "range(0,int(1e8))",
    )
] + [
    # A range outside -m is bounded too (shuffle() lists it while parsing).
    ([f"job.seed={fn}"], "error: job.seed:")
    for fn in ("shuffle(range(0,100000000))", "range(0,100000000)")
]

SWEEP_CASES = [
    (["-m", *[f"{k}={','.join(str(i) for i in range(n))}" for k, n in keys]], "at most")
    for keys in (
        [("job.seed", 40), ("job.steps", 40)],
        [("job.seed", 11), ("job.params.a", 11), ("job.params.b", 11)],
        [("job.seed", 1001)],
    )
] + [
    (["-m", "job.seed=range(0,1000)", "job.lr=0.1,0.2"], f"at most {MAX_SWEEP_RUNS}"),
    (["-m", "job.seed=range(0,500)", "job.steps=range(1,500)"], f"at most {MAX_SWEEP_RUNS}"),
]

FAULT_CASES = [
    ([f"{plus}chaos.faults=[{','.join([fault] * n)}]"], "error: chaos.faults:")
    for plus in ("", "+", "++")
    for fault in (FAULT, "{kind:kill_region,after_s:1}")
    for n in (MAX_FAULTS + 1, 1000)
]

# Every duration, CPU and interval key refuses a value that is no duration at all.
DURATION_KEYS = [
    "recovery.heartbeat_interval_s",
    "recovery.heartbeat_timeout_s",
    "recovery.provision_timeout_s",
    "recovery.store_outage_s",
    "recovery.node_replace_timeout_s",
    "recovery.region_cooldown_s",
    "cloud.provision_timeout_s",
    "notify.timeout_s",
]
TINY = ["1e-300", "5e-324", "0.001", "-1e-300", "1e300"]
DURATION_CASES = [([f"{k}={v}"], f"error: {k}:") for k in DURATION_KEYS for v in TINY] + [
    ([f"{k}={v}", "hpo.enabled=true"], f"error: {k}:")
    for k in ("hpo.cpus_per_trial", "hpo.snapshot_interval_s")
    for v in ("1e-300", "-1e-300")
]
CPU_CASES = [
    ([f"trainer.{k}={v}"], f"error: trainer.{k}:")
    for k in ("cpus_per_worker", "gpus_per_worker")
    for v in ("1e-300", "5e-324", "0.001", "-1e-300")
] + [(["trainer.cpus_per_worker=0"], "error: trainer.cpus_per_worker:")]
FAULT_DURATION_CASES = [
    ([f"chaos.faults=[{{kind:{kind},{field}:{v}{extra}}}]"], f"error: chaos.faults[0].{field}:")
    for kind, field, extra in (
        ("kill_region", "after_s", ""),
        ("preempt", "grace_s", ",at_step:5"),
        ("partition", "duration_s", ",at_step:5"),
    )
    for v in ("1e-300", "-1e-300", "1e300")
] + [([f"+{R}.storage_options.op_timeout_s={v}"], f"error: {R}.storage_options.op_timeout_s:") for v in TINY]

# Credential option names: the issue's, providers' own, and each written with other case,
# separators and look-alike digits, at any depth of the store's or the control's options.
SECRET_NAMES = [
    "SSECustomerKey",
    "sse_customer_key",
    "CopySourceSSECustomerKey",
    "client_secret",
    "private_key",
    "token",
    "secretaccesskey",
    "SecretAccessKey",
    "secret-access-key",
    "Passw0rd",
    "PASSWORD",
    "p4ssw0rd",
    "s3cr3t",
    "S3CR3T_K3Y",
    "account_key",
    "AccountKey",
    "sas_token",
    "SasToken",
    "connection_string",
    "ConnectionString",
    "session_token",
    "AWS_SESSION_TOKEN",
    "security_token",
    "api_key",
    "ApiKey",
    "apiKey",
    "access_token",
    "refresh_token",
    "pkey",
    "passphrase",
    "key",
    "KEY",
    "secret",
    "credential",
    "credentia1s",
    "auth_token",
    "Authorization",
]
SECRET_PLACES = [
    (f"{R}.storage_options", "{name}=x"),
    (f"{R}.storage_options", "s3_additional_kwargs.{name}=x"),
    ("cloud.control_options", "client_kwargs.{name}=x"),
    ("cloud.control_options", "{name}=x"),
]
SECRET_CASES = [
    ([f"+{prefix}.{shape.format(name=name)}"], f"error: {prefix}.")
    for name in SECRET_NAMES
    for prefix, shape in SECRET_PLACES
] + [
    ([f"+{R}.storage_options.s3_additional_kwargs={{{name}:x}}"], f"error: {R}.storage_options.s3_additional_kwargs")
    for name in ("SSECustomerKey", "Passw0rd", "secretaccesskey")
]

PATH_CASES = [
    ([f"{key}='{value}'"], f"error: {key}:")
    for key in ("home", "job.code_dir", "data.cache_dir")
    for value in ("/tmp/a::b", "simplecache::/tmp/x", "file:///tmp/x", "s3://bucket/x", "a::b")
] + [
    ([f"{key}='{url}'"], f"error: {key}:")
    for key in (f"{R}.store", "cloud.control_store")
    for url in (
        "simplecache::s3://bucket/x",
        "s3://bucket/x::file:///tmp",
        "file:///tmp/x::memory://y",
        "filecache::file:///tmp/x",
        "s3://bucket/file:///tmp/x",
        "file:///tmp/s3://bucket",
        "gs://b/x/s3://c/y",
    )
]

NO_OP_CASES = (
    [
        ([f"{key}={{}}"], f"error: {key}:")
        for key in (
            "job",
            "cloud",
            "trainer",
            "recovery",
            "chaos",
            "notify",
            "cloud.regions",
            f"{R}",
            "job.params",
            f"{R}.storage_options",
            "hpo.search_space",
        )
    ]
    + [
        ([f"~{key}"], f"error: {key}:")
        for key in (
            "action",
            "home",
            "job",
            "job.name",
            "job.steps",
            "job.workload",
            "cloud",
            "cloud.regions",
            "cloud.provider",
            f"{R}.store",
            "trainer.workers",
            "chaos",
            "chaos.faults",
            "recovery.heartbeat_interval_s",
            "notify",
            "format",
        )
    ]
    + [([f"~{key}=run"], f"error: {key}:") for key in ("action",)]
    + [
        ([first, second], f"error: {first.partition('=')[0]}:")
        for first, second in (
            ("cloud=local", "cloud=aws"),
            ("cloud=aws", "cloud=local"),
            ("job=digits", "job=gpt"),
            ("chaos=none", "chaos=soak"),
            ("recovery=default", "recovery=warm_standby"),
            ("data=sharded", "data=ray_data"),
        )
    ]
)

# The control key's edges: each refused before a word is printed or anything is written (no
# run folder, no folder in the control store), by its source, never showing the key. SANDBOX
# in a case stands for the test's sandbox, whose keys/ folder and ORCH_HOSTILE_* variables
# key_material makes. A cmd: key's command is a process: tests/integration's.
SANDBOX = "@SANDBOX@"
SECRET = "SECRETKEY"
KEY_SOURCES = [
    (f"file:{SANDBOX}/keys/big", f"file:{SANDBOX}/keys/big gives more than 4096 bytes"),
    (f"file:{SANDBOX}/keys/blank", f"file:{SANDBOX}/keys/blank gives a blank key"),
    (f"file:{SANDBOX}/keys/short", f"file:{SANDBOX}/keys/short gives 5 characters"),
    (f"file:{SANDBOX}/keys/open", f"{SANDBOX}/keys/open is readable by others"),
    (f"file:{SANDBOX}/keys", f"{SANDBOX}/keys is not a regular file"),
    (f"file:{SANDBOX}/keys/fifo", f"{SANDBOX}/keys/fifo is not a regular file"),
    (f"file:{SANDBOX}/keys/missing", f"cannot read file:{SANDBOX}/keys/missing"),
    ("env:ORCH_HOSTILE_BLANK", "env:ORCH_HOSTILE_BLANK is set but blank"),
    ("env:ORCH_HOSTILE_EMPTY", "env:ORCH_HOSTILE_EMPTY is set but blank"),
    ("env:ORCH_HOSTILE_SHORT", "env:ORCH_HOSTILE_SHORT gives 5 characters"),
    ("env:ORCH_HOSTILE_BIG", "env:ORCH_HOSTILE_BIG gives more than 4096 bytes"),
]
KEY_CASES = [
    (
        [*words, f"cloud.control_store=file://{SANDBOX}/ctl", f"cloud.control_key='{spec}'"],
        f"error: cloud.control_key: {why}",
    )
    for words in ([], ["run_id=r1", "job.steps=3"], ["action=resume", "run_id=r1"], ["detach=true"])
    for spec, why in KEY_SOURCES
]


def key_material(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bad keys KEY_CASES name: files under root/keys (0600 unless said), variables set."""
    keys = root / "keys"
    keys.mkdir(mode=0o700)
    for name, data in (("big", SECRET.encode() * 600_000), ("blank", b" " * 40), ("short", b"SECRE")):
        (keys / name).write_bytes(data)
        (keys / name).chmod(0o600)
    (keys / "open").write_text(SECRET * 8)
    (keys / "open").chmod(0o644)
    os.mkfifo(keys / "fifo", 0o600)
    for name, value in (("BLANK", " " * 40), ("EMPTY", ""), ("SHORT", "SECRE"), ("BIG", SECRET * 500)):
        monkeypatch.setenv(f"ORCH_HOSTILE_{name}", value)


# Search spaces whose numbers no trial could use: beyond int64 or a double, more digits
# than a double holds, not numbers, log ranges through 0, ranges whose width overflows,
# and values a run's config refuses (at a range's edge, drawn or not).
BAD_SPECS = [
    "randint 0 99999999999999999999",
    "randint 1 99999999999999999999",
    "randint -99999999999999999999 1",
    "randint 1 9223372036854775808",
    "choice 1 99999999999999999999",
    "grid 1 " + "9" * 5000,
    "quniform 1 99999999999999999999 1",
    "uniform 1 1e400",
    "uniform -1e308 1e308",
    "loguniform 0 1",
    "loguniform -1 1",
    "qloguniform 0 8 1",
    "uniform 0.1 0." + "1" * 30,
    "choice 1 inf",
    "choice 1 nan",
    "choice 1 1e-400",
    "quniform 0 1e300 1e-300",
    "randint 1 0x10",
    "choice 1 ١٢",
    "choice " + " ".join(["1"] * 1001),
]
SEARCH_KEYS = ["hidden_size", "batch_size", "job.seed", "job.params.width", "trainer.grad_accum_steps"]
SEARCH_CASES = [
    (["hpo.enabled=true", f"hpo.search_space.{key}='{spec}'"], f"error: hpo.search_space.{key}:")
    for key in SEARCH_KEYS
    for spec in BAD_SPECS
] + [
    (["hpo.enabled=true", f"hpo.search_space.{key}='{spec}'"], f"error: hpo.search_space.{key}:")
    for key, spec in (
        ("hidden_size", "randint 0 64"),  # 0: an edge a random search may draw
        ("hidden_size", "randint 1 9223372036854775807"),
        ("batch_size", "randint 1 99999999"),
        ("job.seed", "randint 0 9223372036854775807"),
        ("lr", "uniform -1 1"),
        ("trainer.grad_clip_norm", "uniform -1 1"),
        ("trainer.torch_threads", "choice 1 0"),
    )
]

FUZZ_CASES = (
    NUMBER_CASES
    + NESTED_NUMBER_CASES
    + NESTING_CASES
    + LONG_CASES
    + RANGE_CASES
    + SWEEP_CASES
    + FAULT_CASES
    + DURATION_CASES
    + CPU_CASES
    + FAULT_DURATION_CASES
    + SECRET_CASES
    + PATH_CASES
    + NO_OP_CASES
    + KEY_CASES
    + SEARCH_CASES
)


@pytest.mark.parametrize(("args", "names"), FUZZ_CASES, ids=[" ".join(a)[:60] for a, _ in FUZZ_CASES])
def test_a_hostile_command_line_is_one_line_and_exit_2(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: list[str], names: str
) -> None:
    if any(SANDBOX in a for a in args):
        key_material(sandbox, monkeypatch)
        args, names = [a.replace(SANDBOX, str(sandbox)) for a in args], names.replace(SANDBOX, str(sandbox))
    line = refused(sandbox, args, capsys, names)
    assert SECRET not in line


def test_a_bad_env_key_is_taken_out_of_the_environment_all_the_same(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    key_material(sandbox, monkeypatch)
    store = f"cloud.control_store=file://{sandbox}/ctl"
    refused(sandbox, [store, "cloud.control_key=env:ORCH_HOSTILE_BLANK"], capsys, "is set but blank")
    assert "ORCH_HOSTILE_BLANK" not in os.environ


def test_the_fuzz_has_at_least_300_cases_of_its_own() -> None:
    assert len(FUZZ_CASES) >= 300


# --- a run's folder that is damaged, not free ---------------------------------------------------


def _deny_as_the_kernel_does_to_others(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """Root reads a file of mode 0 (CI runs as root): opening ``path`` is refused here as
    the kernel refuses any other user, EACCES, whichever way it is opened."""
    import builtins
    import errno

    def denied(target: object) -> bool:
        try:
            return os.path.realpath(os.fspath(target)) == str(path.resolve())  # type: ignore[arg-type]
        except TypeError:
            return False  # a file descriptor: opened already

    def refuse(opener):  # type: ignore[no-untyped-def]
        def opened(target, *args, **kwargs):  # type: ignore[no-untyped-def]
            if denied(target):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(target))
            return opener(target, *args, **kwargs)

        return opened

    monkeypatch.setattr(os, "open", refuse(os.open))
    monkeypatch.setattr(builtins, "open", refuse(builtins.open))


@pytest.mark.parametrize("action", ["run", "resume"])
@pytest.mark.parametrize("damage", ["empty", "unreadable", "a-folder", "a-fifo", "a-dangling-link"])
def test_an_empty_or_unreadable_journal_is_a_damaged_run_not_a_new_one(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, action: str, damage: str
) -> None:
    from orchestrator.config.compose import compose
    from orchestrator.wire.codec import to_plain

    run_dir = sandbox / "home" / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(to_plain(compose(["run_id=r1"]))))
    journal = run_dir / "journal.jsonl"
    if damage == "a-folder":
        journal.mkdir()
    elif damage == "a-fifo":
        os.mkfifo(journal)
    elif damage == "a-dangling-link":
        journal.symlink_to(sandbox / "nowhere")
    else:
        journal.write_bytes(b"")
    if damage == "unreadable":
        journal.chmod(0)
        if os.geteuid() == 0:
            _deny_as_the_kernel_does_to_others(monkeypatch, journal)
    line = refused(sandbox, [f"action={action}", "run_id=r1"], capsys, "journal.jsonl")
    said = {"empty": "is empty", "unreadable": "cannot be read (permission denied)", "a-folder": "a folder"}
    assert said.get(damage, "not a regular file") in line, line


# --- what stays allowed ---------------------------------------------------------------------------

ALLOWED = [
    ["job.params.x=9223372036854775807", "job.params.y=-9223372036854775808"],
    ["job.lr=0.30000000000000004"],
    ["job.lr=1e-300"],
    ["job.params.x=[[[[1]]]]"],
    ["trainer.cpus_per_worker=0.5"],
    ["trainer.gpus_per_worker=0"],
    ["recovery.heartbeat_interval_s=0.05", "recovery.heartbeat_timeout_s=0.3"],
    ["recovery.node_replace_timeout_s=0", "recovery.region_cooldown_s=0"],
    ["~cloud.regions.local-c"],
    [f"+{R}.storage_options.s3_additional_kwargs.SSEKMSKeyId=arn"],
    [f"+{R}.storage_options.max_tokens=3"],
    [f"+{R}.storage_options.op_timeout_s=3"],
    ["job.name='run::1'".replace("::", "-")],
]


@pytest.mark.parametrize("overrides", ALLOWED, ids=[" ".join(a)[:60] for a in ALLOWED])
def test_what_is_in_bounds_still_composes(sandbox: Path, overrides: list[str]) -> None:
    from orchestrator.config.compose import compose

    compose(overrides)


@pytest.mark.parametrize("sweep", [["job.seed=range(0,1000)"], ["job.seed=range(0,25)", "job.steps=range(1,41)"]])
def test_a_sweep_within_bounds_is_expanded(sweep: list[str]) -> None:
    from orchestrator.commands.sweep import expand

    assert len(expand(sweep).runs) <= MAX_SWEEP_RUNS


def test_orchestrator_home_is_a_literal_path_never_interpolated(sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.config.compose import compose

    monkeypatch.setenv("ORCH_HOSTILE_SECRET", "hunter2")
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(sandbox / "home" / "${oc.env:ORCH_HOSTILE_SECRET}"))
    with pytest.raises(Exception, match="home") as err:
        compose([])
    assert "hunter2" not in str(err.value)
