"""Hydra's conventions on this command line: its flags (--cfg, --info, -m, --help), its
settings refused by name, a sweep's expansion and summary, adding a region with '+'.

Each Hydra compose costs ~0.3 s: the pure parts (parsing, expansion, run ids, help from
the schema, refusals) are tested without one, and the few tests that compose share
their compositions."""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from orchestrator.__main__ import main
from orchestrator.commands import sweep
from orchestrator.config.cli import REFUSED_FLAGS, parse_args
from orchestrator.config.compose import CONF_DIR, compose, split_region_additions
from orchestrator.config.hydra_errors import hydra_refusal
from orchestrator.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


# --- the options (pure) -----------------------------------------------------------------------


def test_the_options_are_taken_off_and_the_overrides_left_in_order(tmp_path: Path) -> None:
    opts = parse_args(
        ["-m", "job=digits", "--cfg", "job", "--config-dir", str(tmp_path), "job.lr=0.1,0.2", "--resolve"]
    )
    assert opts.multirun and opts.cfg == "job" and opts.info is None and not opts.help
    assert opts.config_dirs == [str(tmp_path)]
    assert opts.overrides == ["job=digits", "job.lr=0.1,0.2", f"hydra.searchpath=['file://{tmp_path}']"]
    assert parse_args(["--cfg=all", "-c", "hydra"]).cfg == "hydra"
    assert parse_args(["--multirun"]).multirun
    # --info takes its kind optionally, as Hydra's does: a word that is none is an override.
    assert (parse_args(["--info", "job=gpt"]).info, parse_args(["--info", "job=gpt"]).overrides) == ("all", ["job=gpt"])
    assert parse_args(["--info", "searchpath"]).info == "searchpath"
    assert parse_args(["--info=defaults"]).info == "defaults"


@pytest.mark.parametrize(
    ("args", "key", "words"),
    [
        (["--cfg"], "--cfg", "job|hydra|all"),
        (["--cfg", "yaml"], "--cfg", "allowed: job, hydra, all"),
        (["--info", "plugins"], "--info", "allowed: all, searchpath, defaults"),
        (["--cfg", "job", "--info"], "--info", "give one"),
        (["-m", "--info"], "--info", "drop -m"),
        (["--config-dir"], "--config-dir", "needs a folder"),
        (["-x"], "-x", "options are --config-dir DIR"),
        (["--multi-run"], "--multi-run", "options are --config-dir DIR"),
        *[([flag], flag, why[:30]) for flag, why in REFUSED_FLAGS.items()],
        (["-sc"], "-sc", "shell completion is not offered"),
        (["-cn", "x"], "-cn", "+experiment=NAME"),
        (["-cp", "x"], "-cp", "--config-dir DIR"),
    ],
)
def test_a_refused_or_malformed_option_is_one_line_naming_it(args: list[str], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_args(args)
    assert info.value.key == key and words in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("hydra.run.dir", "<home>/runs/<run_id>"),
        ("hydra.job.chdir", "working directory is never changed"),
        ("hydra.sweep.dir", "each run of a sweep"),
        ("hydra.sweep.subdir", "each run of a sweep"),
        ("hydra.output_subdir", "config.json"),
        ("hydra.mode", "-m (--multirun)"),
        ("hydra/launcher", "no launcher plugin"),
        ("hydra.launcher.n_jobs", "no launcher plugin"),
        ("hydra/sweeper", "no sweeper plugin"),
        ("hydra.verbose", "journal.jsonl"),
        ("hydra/job_logging", "journal.jsonl"),
        ("hydra.foo", "runs nothing through it"),
        ("hydra", "runs nothing through it"),
    ],
)
def test_each_hydra_setting_not_honoured_is_refused_with_why(key: str, words: str) -> None:
    why = hydra_refusal(key)
    assert why is not None and words in why
    assert why.startswith("a Hydra setting this command does not honour: ")


def test_the_search_path_is_honoured_and_other_keys_are_no_hydra_settings() -> None:
    assert hydra_refusal("hydra.searchpath") is None
    assert hydra_refusal("hydrant.x") is None and hydra_refusal("job.hydra") is None


# --- a sweep's runs (pure) --------------------------------------------------------------------


def test_outside_a_sweep_a_sweep_value_says_how_to_sweep_or_quote_it() -> None:
    with pytest.raises(ConfigError) as info:
        compose(["job.lr=0.03,0.05"])  # refused before Hydra composes
    assert info.value.key == "job.lr"
    assert "add -m" in str(info.value) and "job.lr='0.03,0.05'" in str(info.value)


# --- --help from the schema (pure) ------------------------------------------------------------


# --- --cfg: the config printed composes the same config again -----------------------------------


def test_cfg_hydra_and_info_name_the_search_path_and_the_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "mine.yaml").write_text("# @package _global_\njob:\n  name: mine\n")
    assert main(["--info", "--config-dir", str(tmp_path), "cloud=multi"]) == 0
    out = capsys.readouterr().out
    assert f"  file://{CONF_DIR}\n  file://{tmp_path}\n  structured://" in out
    assert re.search(r"job +\*digits digits_hpo gpt gpt_large gpt_xl mine synthetic", out)
    assert "  cloud: multi\n" in out and "  base_config\n" in out


# --- adding a region with '+' ----------------------------------------------------------------


def test_the_region_hint_adds_a_region_with_the_other_fields_at_their_defaults() -> None:
    cfg = compose(["+cloud.regions.local-d.store=file:///tmp/d", "cloud.regions.local-d.num_cpus=4"])
    assert list(cfg.cloud.regions) == ["local-a", "local-b", "local-c", "local-d"]
    d = cfg.cloud.regions["local-d"]
    assert (d.store, d.num_cpus, d.num_gpus, d.storage_options) == ("file:///tmp/d", 4, 0, {})


def test_the_hint_itself_is_what_a_misnamed_region_is_told() -> None:
    with pytest.raises(ConfigError) as info:
        compose(["cloud.regions.local-d.num_cpus=4"])
    hint = str(info.value).rsplit("give its store: ", 1)[1].rstrip(")")
    assert hint == "+cloud.regions.local-d.store=URL"


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["+cloud.regions.local-d.num_cpus=4"], "cloud.regions.local-d.store", "needs its store"),
        (["+cloud.regions.local-a.store=file:///tmp/a"], "cloud.regions.local-a.store", "without '+'"),
        (["+cloud.regions.local-d.storage_options.x=1"], "cloud.regions.local-d", "to add one, give its store"),
    ],
)
def test_adding_a_region_wrongly_is_one_line_naming_the_key(overrides: list[str], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        compose(overrides)
    assert info.value.key == key and words in str(info.value)


def test_region_overrides_are_split_off_only_for_a_region_added() -> None:
    given, added = split_region_additions(
        [
            "cloud.regions.local-a.num_cpus=4",
            "+cloud.regions.local-a.storage_options.op_timeout_s=3",
            "cloud.regions.x.num_gpus=1",
            "+cloud.regions.x.store=file:///x",
            "++cloud.regions.y.store=file:///y",
        ]
    )
    assert added == {"x": ["cloud.regions.x.num_gpus=1", "+cloud.regions.x.store=file:///x"]}
    assert given == [
        "cloud.regions.local-a.num_cpus=4",
        "+cloud.regions.local-a.storage_options.op_timeout_s=3",
        "++cloud.regions.y.store=file:///y",
    ]


# --- a sweep from the command line, each run recorded by an injected runner ----------------------


@dataclass
class Recorder:
    """Stands in for the runs' processes: records each run's config and overrides, and
    leaves the folder a run that ended would leave (journal, result.json with a loss)."""

    interrupt_at: int | None = None
    ran: list[sweep.Planned] = field(default_factory=list)
    signals: list[int] = field(default_factory=list)

    def run(self, planned: sweep.Planned) -> int:
        from orchestrator.runstate import events as E
        from orchestrator.runstate.journal import Journal
        from orchestrator.runstate.result import RunRecord, write_result

        self.ran.append(planned)
        run_dir = os.path.join(planned.config.home_path, "runs", planned.run_id)
        os.makedirs(run_dir)
        Journal(os.path.join(run_dir, "journal.jsonl")).emit(
            E.RunStarted(run_id=planned.run_id, config={"job": {"name": "digits", "steps": 10}})
        )
        if len(self.ran) == self.interrupt_at:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, to the sweep
            status, code = "INTERRUPTED", sweep.EXIT_INTERRUPTED
        else:
            status, code = "SUCCEEDED", 0
        final = {"final_step": 10, "metrics": {"loss": planned.config.job.lr / 10}}
        write_result(run_dir, RunRecord(planned.run_id, 0.0, status=status, final=final), {})
        return code

    def interrupt(self, signum: int) -> None:
        self.signals.append(signum)


def test_a_sweep_runs_each_run_with_its_own_config_and_id_and_prints_both(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = Recorder()
    monkeypatch.setattr(sweep, "runner", lambda: rec)
    assert main(["-m", "job=digits", "job.lr=0.03,0.05", "run_id=lr", "progress=false"]) == 0
    assert [p.config.job.lr for p in rec.ran] == [0.03, 0.05]
    assert [p.run_id for p in rec.ran] == [p.config.run_id for p in rec.ran] == ["lr-0", "lr-1"]
    assert rec.ran[0].overrides == ("job=digits", "job.lr=0.03", "progress=false", "run_id=lr-0")
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["RUN", "ID", "job.lr", "STATUS", "STEP", "LOSS", "DURATION"]
    assert out[1].split()[:5] == ["lr-0", "0.03", "SUCCEEDED", "10/10", "0.003"]
    assert out[2].split()[:5] == ["lr-1", "0.05", "SUCCEEDED", "10/10", "0.005"]
    assert out[-1] == "sweep: 2 runs, 2 succeeded"


def test_ctrl_c_stops_the_sweep_the_run_interrupted_and_the_rest_not_started(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = Recorder(interrupt_at=1)
    monkeypatch.setattr(sweep, "runner", lambda: rec)
    before = signal.getsignal(signal.SIGINT)
    assert main(["-m", "job.lr=0.03,0.05"]) == sweep.EXIT_INTERRUPTED
    assert signal.getsignal(signal.SIGINT) is before  # the sweep's handlers were put back
    assert len(rec.ran) == 1 and rec.signals == [signal.SIGINT]
    assert rec.ran[0].run_id.startswith("digits-")  # none given: the run's own kind of id
    out = capsys.readouterr().out
    assert re.search(r"digits-\S+ +0\.03 +INTERRUPTED", out) and re.search(r"\S+ +0\.05 +NOT_STARTED", out)
    assert "the sweep was stopped before it" in out
    assert out.rstrip().endswith("stopped by a signal, 1 not started")


def test_a_sweep_whose_last_run_is_refused_launches_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rec = Recorder()
    monkeypatch.setattr(sweep, "runner", lambda: rec)
    assert main(["-m", "job.lr=0.03,-1"]) == 2
    assert rec.ran == []
    assert capsys.readouterr().err.startswith("error: job.lr: got -1.0")


@pytest.mark.parametrize(
    ("metrics", "shown"),
    [
        ({"loss": 0.5, "eval_loss": 0.7}, "0.5"),
        ({"accuracy": 0.96, "eval_loss": 0.12415723}, "0.1242"),
        ({"loss": float("nan"), "eval_loss": 0.2}, "0.2"),
        ({"loss": True}, "-"),
        ({}, "-"),
    ],
)
def test_the_final_loss_is_the_runs_own_else_the_held_out_one(metrics: dict[str, object], shown: str) -> None:
    assert sweep.fmt_loss({"metrics": metrics}) == shown
    assert sweep.fmt_loss(None) == "-"


def test_the_exit_status_is_1_when_a_run_did_not_succeed() -> None:
    row = sweep.SummaryRow("a", (), "FAILED", "-", "-", "-")
    ok = sweep.SummaryRow("b", (), "SUCCEEDED", "-", "-", "-")
    text = sweep.render_summary((), [ok, row], stopped=False)
    assert text.endswith("sweep: 2 runs, 1 succeeded")


def test_config_dir_and_a_given_search_path_are_searched_together(tmp_path: Path) -> None:
    from orchestrator.config.cli import parse_args

    mine, more = tmp_path / "mine", tmp_path / "more"
    mine.mkdir()
    opts = parse_args(["--config-dir", str(mine), f'hydra.searchpath=["file://{more}"]', "job=digits"])
    (searchpath,) = [o for o in opts.overrides if o.startswith("hydra.searchpath=")]
    assert searchpath == f"hydra.searchpath=['file://{mine}','file://{more}']"
    assert opts.overrides[0] == "job=digits"
