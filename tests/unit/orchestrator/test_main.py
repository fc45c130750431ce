"""Fuzzing the command line and a run's files through ``python -m orchestrator``'s entry point.

Each case runs ``main()`` in-process in a sandbox (home, a folder "outside" it, the
working directory and the user's home all under one tmp folder) and must: exit 2 with
one line on stderr that names the key or the file, print no traceback, launch nothing
(providers, the controller, the supervisor, preflight and plan fail the test if called)
and write nothing anywhere. A few cases run as a real subprocess, for the real exit
status and stderr.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.__main__ import main
from tests.support.sandbox import launch_nothing, tree

OUTSIDE = "{outside}"  # replaced by the sandbox's folder outside home
R = "cloud.regions.local-a"


@dataclass
class Sandbox:
    root: Path
    home: Path
    outside: Path

    def fill(self, arg: str) -> str:
        return arg.replace(OUTSIDE, str(self.outside))


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    box = Sandbox(tmp_path, tmp_path / "home", tmp_path / "outside")
    for d in (box.home, box.outside, tmp_path / "cwd", tmp_path / "user"):
        d.mkdir()
    launch_nothing(monkeypatch, box.home, tmp_path / "user", tmp_path / "cwd")
    yield box


def refused(box: Sandbox, args: list[str], capsys: pytest.CaptureFixture[str], names: str) -> str:
    """Run the CLI; assert exit 2, one error line naming ``names``, no traceback, no write."""
    before = tree(box.root)
    root_stores = os.path.exists("/stores")
    try:
        code = main([box.fill(a) for a in args])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert code == 2, (args, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert box.fill(names) in lines[0], lines[0]
    assert out == ""
    assert tree(box.root) == before, "something was written"
    assert os.path.exists("/stores") == root_stores
    return lines[0]


# --- command lines --------------------------------------------------------------------------

# Every action takes a run_id; these would be a folder outside home, an option, a name
# too long for a file system, or nothing.
BAD_NAMES = ["../../outside/x", f"{OUTSIDE}/x", "..", "-rf", "a" * 500, ""]
ACTIONS = ["run", "status", "report", "resume", "plan", "list"]
OTHER_BAD_NAMES = ["a/b", ".hidden", "x;rm -rf y", "é"]
NAME_CASES = [
    *[([f"action={a}", f"run_id='{n}'"], "error: run_id:") for a in ACTIONS for n in BAD_NAMES],
    *[([f"run_id='{n}'"], "error: run_id:") for n in OTHER_BAD_NAMES],
    *[([f"job.name='{n}'"], "error: job.name:") for n in ["../../outside/x", f"{OUTSIDE}/x", "", "a" * 65]],
]

NUMBER_CASES = [
    ([f"{key}={value}"], f"error: {key}:")
    for key, values in {
        "job.steps": ["0", "1e20", "100000000000000000000", "1000000001", "inf"],
        "job.batch_size": ["0", "16777217", "9223372036854775808"],
        "job.lr": ["inf", "nan", "0", "-1"],
        "job.seed": ["-1", "4294967296"],
        "job.hidden_size": ["18446744073709551616"],
        "trainer.workers": ["9223372036854775808"],
        "recovery.heartbeat_interval_s": ["inf"],
        "checkpoint.interval_steps": ["10000000000000000000"],
        "job.eval_fraction": ["nan"],
    }.items()
    for value in values
]

STORE_CASES = [
    ([f"{key}='{url}'"], f"error: {key}:")
    for key in (f"{R}.store", "cloud.control_store")
    for url in [
        "memory://x",
        "file://relative",
        "relative/path",
        "ftp://host/x",
        "s3://",
        "s3://user:pass@bucket/x",
        "gs://u@bucket/x",
    ]
]

SECRET_CASES = [
    ([f"+{prefix}.{override}"], f"error: {prefix}.{key}:")
    for prefix in (f"{R}.storage_options", "cloud.control_options")
    for override, key in [
        ("client_kwargs.aws_secret_access_key=x", "client_kwargs.aws_secret_access_key"),
        ("client_kwargs={aws_session_token:x}", "client_kwargs.aws_session_token"),
        ("key=AKIA", "key"),
        ("token=ya29", "token"),
        ("headers={Authorization:x}", "headers.Authorization"),
        ("endpoint_url='http://u:p@127.0.0.1:9'", "endpoint_url"),
    ]
]

HOME_CASES = [
    *[(["run_id=r1", f"home='{h}'"], "error: home:") for h in ["", " ", f"{OUTSIDE}/afile", f"{OUTSIDE}/afile/below"]],
    *[(["action=status", "run_id=r1", f"home='{h}'"], "error: home:") for h in ["", f"{OUTSIDE}/afile"]],
    *[(["action=list", f"home='{h}'"], "error: home:") for h in ["", f"{OUTSIDE}/afile"]],
]

UNHONOURED_CASES = [
    ([arg], f"error: {key}:")
    for arg, key in [
        ("hydra.run.dir=/tmp/x", "hydra.run.dir"),
        ("hydra.job.chdir=true", "hydra.job.chdir"),
        ("hydra.output_subdir=null", "hydra.output_subdir"),
        ("hydra.sweep.dir=x", "hydra.sweep.dir"),
        ("+hydra.foo=1", "hydra.foo"),
        ("hydra.mode=MULTIRUN", "hydra.mode"),
        ("hydra.verbose=true", "hydra.verbose"),
        ("hydra/launcher=joblib", "hydra/launcher"),
        ("--cfg=yaml", "--cfg"),
        ("--cfg", "--cfg"),
        ("--info=plugins", "--info"),
        ("--hydra-help", "--hydra-help"),
        ("--shell-completion", "--shell-completion"),
        ("-sc", "-sc"),
        ("--config-name=x", "--config-name"),
        ("--multi-run", "--multi-run"),
        ("job.lr=0.03,0.05", "job.lr"),
    ]
] + [
    # A sweep (-m) refused before its first run launches.
    (["-m", "job.lr=0.03,-1"], "error: job.lr:"),
    (["-m", "job.lr=interval(0,1)"], "error: job.lr:"),
    (["-m", "run_id=a,a"], "error: run_id:"),
    (["-m", "job.lr=0.1,0.2", "action=list"], "error: action:"),
    (["-m", "--info"], "error: --info:"),
]

OTHER_CASES = [
    (["job.workload=nope"], "error: job.workload:"),
    (["job.workload=nope_pkg_zz:Net"], "error: job.workload:"),
    (["job.workload=os:path"], "error: job.workload:"),
    (["job.train_func=nope_pkg_zz:f"], "error: job.train_func:"),
    (["job=nope"], "error: job:"),
    (["action=explode"], "error: action:"),
    (["bogus=1"], "error: bogus:"),
    (["trainer.wrkers=3"], "error: trainer.wrkers:"),
    (["cloud.provider=bogus"], "error: cloud.provider:"),
    (["--config-dir", f"{OUTSIDE}/nope"], "error: --config-dir:"),
    (["job.params.hidden=64"], "error: job.params.hidden:"),
    (["action=status"], "error: run_id:"),
    (["action=list", "run_id=r1"], "error: run_id:"),
    (["action=status", "run_id=r1", "format=json"], "error: format:"),
    (["action=list", "format=yaml"], "error: format:"),
    (["action=logs"], "error: run_id:"),
    (["action=logs", "run_id=r1"], "error: run_id: no run named 'r1'"),
    (["action=logs", "run_id=r1", "attempt=0"], "error: attempt:"),
    (["action=logs", "run_id=r1", "rank=-1"], "error: rank:"),
    (["action=logs", "run_id=r1", "rank=driverx"], "error: rank:"),
    (["action=logs", "run_id=r1", "follow=maybe"], "error: follow:"),
    (["action=status", "run_id=r1", "attempt=1"], "error: attempt:"),
    (["show_logs=true", "action=list"], "error: show_logs:"),
    (["run_id=a\nb"], "error: run_id:"),
    (["digits"], "error: digits:"),
    (["chaos.faults=[{kind:explode,at_step:5}]"], "error: chaos.faults[0].kind:"),
]

# A notifier that could never work; none of the messages may show the token.
NOTIFY_CASES = [
    *[
        ([f"notify.webhook='{url}'"], "error: notify.webhook:")
        for url in [
            "ftp://hooks.example.com/T0K3N",
            "hooks.example.com/T0K3N",
            "",
            "https://bot:T0K3N@hooks.example.com/x",
            "https://hooks.example.com:0x50/T0K3N",
            "javascript:alert(T0K3N)",
        ]
    ],
    *[
        ([f"notify.command={cmd}"], "error: notify.command:")
        for cmd in ["''", "'  '", '"curl -H \'Authorization: T0K3N"', "'no-such-program-zz --token T0K3N'"]
    ],
    *[([f"notify.timeout_s={t}"], "error: notify.timeout_s:") for t in ["-1", "0", "nan", "1e9"]],
    # A webhook read from an environment variable that is not set (for a run or a plan), or no name.
    *[
        (
            [f"action={a}", "notify.webhook=env:ORCH_FUZZ_NO_SUCH_HOOK"],
            "error: notify.webhook: env:ORCH_FUZZ_NO_SUCH_HOOK",
        )
        for a in ("run", "plan")
    ],
    *[
        ([f"notify.webhook='env:{name}'"], "error: notify.webhook: names no environment variable after env:")
        for name in ("1HOOK", "https://hooks.example.com/T0K3N")
    ],
    # How a run's config.json names a target kept in its notify.secret: not a user's to give.
    (["notify.webhook='notify.secret:https://hooks.example.com'"], "error: notify.webhook: notify.secret:..."),
    (["notify.command='notify.secret:notify.sh'"], "error: notify.command: notify.secret:..."),
]

CLI_CASES = (
    NAME_CASES + NUMBER_CASES + STORE_CASES + SECRET_CASES + HOME_CASES + UNHONOURED_CASES + OTHER_CASES + NOTIFY_CASES
)


@pytest.mark.parametrize(("args", "names"), CLI_CASES, ids=[" ".join(a)[:60] for a, _ in CLI_CASES])
def test_a_malformed_command_line_is_one_line_and_exit_2(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str], args: list[str], names: str
) -> None:
    (sandbox.outside / "afile").write_text("a file where a folder is expected")
    line = refused(sandbox, args, capsys, names)
    assert "T0K3N" not in line


@pytest.mark.parametrize("value", [None, "ftp://hooks.example.com/T0K3N", "hooks.example.com/T0K3N", ""])
def test_a_webhook_environment_variable_unset_or_holding_no_url_is_one_line_naming_it_never_its_value(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("ORCH_FUZZ_HOOK", raising=False)
    else:
        monkeypatch.setenv("ORCH_FUZZ_HOOK", value)
    line = refused(
        sandbox, ["notify.webhook=env:ORCH_FUZZ_HOOK"], capsys, "error: notify.webhook: env:ORCH_FUZZ_HOOK: "
    )
    assert "T0K3N" not in line and "ORCH_FUZZ_HOOK " in line


# --- damaged run files ----------------------------------------------------------------------

RESULT = {
    "run_id": "r1",
    "status": "SUCCEEDED",
    "reason": "",
    "final_step": 500,
    "final_checkpoint": None,
    "metrics": {"accuracy": 0.9},
    "incidents": [],
    "attempts": 1,
    "duration_s": 1.5,
}
EVENTS = [
    {"ts": 1.0, "type": "run_started", "run_id": "r1", "config": {"job": {"name": "digits"}}},
    {"ts": 2.0, "type": "transition", "from": "PENDING", "to": "PROVISIONING"},
]
DAMAGE: dict[str, bytes] = {
    "empty": b"",
    "truncated": b'{"status": "SUCC',
    "list": b"[1, 2]",
    "null": b"null",
    "binary": bytes(range(256)) * 4,
    "huge-garbage-line": b"x" * 2_000_000,
    "deep": b"[" * 100_000,
}
RESULT_DAMAGE = {
    **DAMAGE,
    "status-int": json.dumps({**RESULT, "status": 5}).encode(),
    "incidents-str": json.dumps({**RESULT, "incidents": "none"}).encode(),
    "incident-no-kind": json.dumps({**RESULT, "incidents": [{"from_region": "a"}]}).encode(),
}
JOURNAL_DAMAGE = {
    "list-line": b"[1, 2]\n",
    "number-line": b"5\n",
    "empty-object": b"{}\n",
    "ts-string": b'{"ts": "noon", "type": "x"}\n',
    "unknown-state": b'{"ts": 3.0, "type": "transition", "to": "BOGUS"}\n',
    "incident-without-region": b'{"ts": 3.0, "type": "incident", "kind": "region_lost"}\n',
    "bad-decision": b'{"ts": 3.0, "type": "decision", "failure": "x", "action": "y"}\n',
    "binary-line": b"\xff\xfe\x80garbage\n",
}


@pytest.fixture(scope="module")
def saved_config() -> str:
    """A healthy config.json's text, its home a placeholder: composed once for the module."""
    from orchestrator.config.compose import compose
    from orchestrator.wire.codec import to_plain

    os.environ["ORCHESTRATOR_HOME"] = "/HOME-PLACEHOLDER"
    try:
        cfg = compose(["run_id=r1"])
    finally:
        del os.environ["ORCHESTRATOR_HOME"]
    return json.dumps(to_plain(cfg), indent=1)


def a_run(box: Sandbox, config: str) -> Path:
    """A run whose controller died early: config.json and a short journal, no result."""
    run_dir = box.home / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(config.replace("/HOME-PLACEHOLDER", str(box.home)))
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    return run_dir


# Every reader meets every kind of damage once; the other actions meet a few.
FEW = ("empty", "truncated", "binary", "deep")
FILE_CASES: list[tuple[str, str, str, bytes | None]] = [
    *[("status", "result.json", d, v) for d, v in RESULT_DAMAGE.items()],
    *[(a, "result.json", d, RESULT_DAMAGE[d]) for a in ("report", "resume", "run") for d in FEW],
    *[("status", "journal.jsonl", d, v) for d, v in JOURNAL_DAMAGE.items()],
    *[(a, "journal.jsonl", d, JOURNAL_DAMAGE[d]) for a in ("report", "resume") for d in ("list-line", "binary-line")],
    *[("resume", "config.json", d, v) for d, v in DAMAGE.items()],
    *[(a, name, "a-folder", None) for a in ("status", "resume") for name in ("result.json", "journal.jsonl")],
]


@pytest.mark.parametrize(
    ("action", "name", "damage", "data"), FILE_CASES, ids=[f"{a}-{n}-{d}" for a, n, d, _ in FILE_CASES]
)
def test_a_damaged_run_file_is_one_line_naming_it(
    sandbox: Sandbox,
    capsys: pytest.CaptureFixture[str],
    saved_config: str,
    action: str,
    name: str,
    damage: str,
    data: bytes | None,
) -> None:
    run_dir = a_run(sandbox, saved_config)
    path = run_dir / name
    if data is None:
        path.unlink(missing_ok=True)
        path.mkdir()
    elif name == "journal.jsonl":
        with path.open("ab") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    refused(sandbox, [f"action={action}", "run_id=r1"], capsys, name)


CONFIG_EDITS: dict[str, Callable[[dict], object]] = {
    "job-not-a-mapping": lambda d: d.update(job=5),
    "no-cloud": lambda d: d.pop("cloud"),
    "steps-a-string": lambda d: d["job"].update(steps="abc"),
    "steps-beyond-int64": lambda d: d["job"].update(steps=2**64),
    "a-secret": lambda d: d["cloud"]["regions"]["local-a"]["storage_options"].update(secret="x"),
    "path-as-name": lambda d: d["job"].update(name="../../x"),
}


@pytest.mark.parametrize("edit", list(CONFIG_EDITS))
def test_an_edited_config_json_is_refused_on_resume_naming_the_file(
    sandbox: Sandbox, capsys: pytest.CaptureFixture[str], saved_config: str, edit: str
) -> None:
    run_dir = a_run(sandbox, saved_config)
    d = json.loads((run_dir / "config.json").read_text())
    CONFIG_EDITS[edit](d)
    (run_dir / "config.json").write_text(json.dumps(d))
    refused(sandbox, ["action=resume", "run_id=r1"], capsys, "config.json")


def test_the_fuzz_covers_at_least_150_cases() -> None:
    assert len(CLI_CASES) + len(FILE_CASES) + len(CONFIG_EDITS) >= 150


# --- the real process -----------------------------------------------------------------------
