"""The user's code at the boundary: import paths, the protocol, params against a Params
dataclass, the command line's say over which code trains, and --config-dir. Every failure
is one ConfigError naming the key, raised before anything launches."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.usercode import check_user_code
from orchestrator.errors import ConfigError
from orchestrator.workloads import WorkloadError, declared_reports, make_workload, validate_params, workload_class
from tests.support.paths import FIXTURES

FIXTURE = FIXTURES / "tinywork.py"

BROKEN = '''
from dataclasses import dataclass
import torch

class NoLoss:
    def model(self): ...
    def optimizer(self, model): ...
    def batch(self, step, rank, world): ...

class NoData:
    """Passes the import check, not the data check."""

    def model(self): ...
    def optimizer(self, model): ...
    def loss(self, model, batch): ...

class Both(NoData):
    def batch(self, step, rank, world): ...
    def dataset(self): ...

class Typed(NoData):
    @dataclass
    class Params:
        width: int
        rate: float = 0.1
        mode: str = "fast"
        tags: list[str] | None = None

    def __init__(self, params):
        self.params = params

    def dataset(self):
        return list(range(8))

not_a_class = 3

def train_func(config):
    pass
'''


@pytest.fixture
def userpkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(FIXTURE, tmp_path / "tinywork.py")
    (tmp_path / "usermods.py").write_text(BROKEN)
    (tmp_path / "raises_on_import.py").write_text("raise RuntimeError('config file missing')\n")
    (tmp_path / "imports_missing.py").write_text("import os\nimport torchvision_extras_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("tinywork", "usermods", "raises_on_import", "imports_missing"):
        sys.modules.pop(name, None)
    return tmp_path


def key_of(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        check_user_code(compose(list(overrides)))
    return info.value.key


def message(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        check_user_code(compose(list(overrides)))
    return str(info.value)


def test_bad_import_paths_name_job_workload(userpkg: Path) -> None:
    assert "no module named 'nosuchpkg'" in message("job.workload=nosuchpkg.models:Net")
    assert "has no attribute 'Nope'" in message("job.workload=usermods:Nope")
    assert "expected 'module:name'" in message("job.workload=usermods.NoLoss")
    assert "built-ins: digits, synthetic, gpt" in message("job.workload=resnet")
    assert "is a int, expected a class" in message("job.workload=usermods:not_a_class")
    assert "RuntimeError at " in message("job.workload=raises_on_import:X")
    assert "raises_on_import.py:1: config file missing" in message("job.workload=raises_on_import:X")
    assert key_of("job.train_func=nosuch:train") == "job.train_func"
    assert key_of("job.train_func=usermods:NoLoss") == "job.train_func"


def test_the_protocol_is_checked_before_launch(userpkg: Path) -> None:
    assert "lacks required method loss" in message("job.workload=usermods:NoLoss")
    assert "neither batch(step, rank, world) nor dataset()" in message("job.workload=usermods:NoData")
    assert "defines both batch() and dataset()" in message("job.workload=usermods:Both")


def test_params_are_checked_against_the_params_dataclass(userpkg: Path) -> None:
    base = ("job.workload=usermods:Typed", "job.batch_size=8")
    assert key_of(*base) == "job.params.width"  # required, no default
    assert key_of(*base, "job.params.width=3", "job.params.colour=red") == "job.params.colour"
    assert "expected an integer" in message(*base, "job.params.width=wide")
    assert "expected a number" in message(*base, "job.params.width=3", "job.params.rate=fast")
    assert key_of(*base, "job.params.width=3", "job.params.tags=[1,2]") == "job.params.tags"
    check_user_code(compose([*base, "job.params.width=3", "job.params.rate=1", "job.params.tags=[a]"]))
    cls = workload_class("usermods:Typed")
    assert validate_params(cls, {"width": 3, "rate": 1}) == {"width": 3, "rate": 1.0, "mode": "fast", "tags": None}
    built = make_workload({"workload": "usermods:Typed", "params": {"width": 2}})
    assert built.params["rate"] == 0.1  # defaults filled in for the constructor


def test_a_built_in_takes_no_params_and_a_class_without_params_takes_any(userpkg: Path) -> None:
    assert key_of("job=digits", "job.params.hidden=3") == "job.params.hidden"
    assert validate_params(workload_class("usermods:Typed").__mro__[1], {"anything": 1}) == {"anything": 1}
    with pytest.raises(WorkloadError):
        validate_params(workload_class("usermods:Typed"), {})


def test_a_dataset_workloads_global_batch_must_split_across_workers_and_micro_batches(userpkg: Path) -> None:
    base = ("job.workload=tinywork:Tiny", "trainer.workers=2", "trainer.grad_accum_steps=3")
    assert key_of(*base, "job.batch_size=32") == "job.batch_size"
    check_user_code(compose([*base, "job.batch_size=36"]))
    assert key_of("job.workload=tinywork:Tiny", "data=ray_data") == "data.loader"


def test_the_command_line_decides_what_trains_and_names_the_run(userpkg: Path) -> None:
    cfg = compose(["job.train_func=usermods:train_func", "job.params.epochs=3"])
    assert (cfg.job.train_func, cfg.job.workload, cfg.job.name) == ("usermods:train_func", "", "train_func")
    assert cfg.job.params == {"epochs": 3}
    cfg = compose(["job.workload=tinywork:Tiny", "job.params.hidden=64"])
    assert (cfg.job.workload, cfg.job.name, cfg.job.params) == ("tinywork:Tiny", "tiny", {"hidden": 64})
    assert compose(["job.workload=tinywork:Tiny", "job.name=mine"]).job.name == "mine"
    assert compose(["job=digits"]).job.name == "digits"
    # A job config chosen and its workload replaced: the run is the code's, not the config's.
    assert compose(["job=digits", "job.workload=tinywork:Tiny"]).job.name == "tiny"
    with pytest.raises(ConfigError, match="both are set") as info:
        compose(["job.workload=tinywork:Tiny", "job.train_func=usermods:train_func"])
    assert info.value.key == "job.workload"
    with pytest.raises(ConfigError, match="neither is set"):
        compose(["job.workload="])


def test_a_train_function_takes_only_faults_it_can_meet(userpkg: Path) -> None:
    base = ["job.train_func=usermods:train_func"]
    # Its reports are its steps: at_step faults, kill_worker and user_error meet it there.
    compose([*base, "chaos.faults=[{kind:kill_region,at_step:10},{kind:kill_worker,at_step:3}]"])
    compose([*base, "chaos.faults=[{kind:kill_worker,during:checkpoint_upload}]"])
    compose([*base, "chaos.faults=[{kind:kill_region,after_s:5},{kind:preempt,during:checkpoint_upload}]"])
    # What only the built-in loop's workers hold is refused, naming the kind.
    with pytest.raises(ConfigError) as info:
        compose([*base, "chaos.faults=[{kind:corrupt_peer_state,at_step:3}]"])
    assert info.value.key == "chaos.faults[0].kind"
    # A search over a function: its faults come at search steps, its keys are job.params.*,
    # and PBT (which moves a checkpoint between trials of other values) is the loop's alone.
    search = ["job.train_func=usermods:train_func", "hpo.enabled=true", "hpo.search_space.job.params.lr=uniform 0.1 1"]
    compose([*search, "chaos.faults=[{kind:kill_region,at_step:3}]"])
    with pytest.raises(ConfigError, match=r"its config is job\.params") as info:
        compose([*search, "hpo.search_space.job.lr=uniform 0.1 1"])
    assert info.value.key == "hpo.search_space.job.lr"
    with pytest.raises(ConfigError, match="is not a key a train function reads") as info:
        compose([*search, "hpo.search_space.trainer.grad_clip_norm=uniform 0.5 2"])
    assert info.value.key == "hpo.search_space.trainer.grad_clip_norm"
    with pytest.raises(ConfigError, match=r"with job\.train_func use asha or fifo") as info:
        compose([*search, "hpo.scheduler=pbt", "hpo.num_samples=4", "hpo.perturbation_interval=1"])
    assert info.value.key == "hpo.scheduler"
    with pytest.raises(ConfigError) as info:
        compose([*search, "hpo.trial.workers=3"])  # local regions: 2 CPUs
    assert info.value.key == "hpo.trial.workers"


def test_loop_keys_and_gpus_are_bounded() -> None:
    from orchestrator.commands.run import check_regions

    for override, key in (
        ("trainer.grad_accum_steps=0", "trainer.grad_accum_steps"),
        ("trainer.grad_clip_norm=-1", "trainer.grad_clip_norm"),
        ("trainer.autocast=fp8", "trainer.autocast"),
        ("trainer.torch_threads=0", "trainer.torch_threads"),
        ("trainer.gpus_per_worker=1", "trainer.gpus_per_worker"),  # local regions offer no GPU by default
    ):
        with pytest.raises(ConfigError) as info:
            check_regions(compose([override]))
        assert info.value.key == key, override
    assert check_regions(
        compose(["trainer.gpus_per_worker=1", "cloud.regions.local-a.num_gpus=2", "cloud.candidates=[local-a]"])
    )


def test_config_dir_finds_the_users_own_job_configs(tmp_path: Path, userpkg: Path) -> None:
    from orchestrator.config.cli import parse_args

    def config_dir_overrides(args: list[str]) -> list[str]:
        return parse_args(args).overrides

    (tmp_path / "conf" / "job").mkdir(parents=True)
    (tmp_path / "conf" / "job" / "mine.yaml").write_text(
        "# @package _global_\njob:\n  name: mine\n  workload: tinywork:Tiny\n  params: {hidden: 8}\n  batch_size: 16\n"
    )
    cfg = compose(config_dir_overrides(["--config-dir", str(tmp_path / "conf"), "job=mine"]))
    assert (cfg.job.name, cfg.job.workload, cfg.job.params) == ("mine", "tinywork:Tiny", {"hidden": 8})
    check_user_code(cfg)
    # Our own job configs are still there beside the user's.
    assert compose(config_dir_overrides([f"--config-dir={tmp_path / 'conf'}", "job=digits"])).job.name == "digits"
    with pytest.raises(ConfigError) as info:
        compose(config_dir_overrides(["--config-dir", str(tmp_path / "conf"), "job=nosuch"]))
    assert info.value.key == "job" and "mine" in str(info.value) and "digits" in str(info.value)
    with pytest.raises(ConfigError) as info:
        config_dir_overrides(["--config-dir", str(tmp_path / "missing")])
    assert info.value.key == "--config-dir"


def test_a_train_function_declares_its_report_count_only_through_its_epochs() -> None:
    assert declared_reports({"epochs": 5, "lr": 0.1}) == 5
    assert declared_reports({"num_epochs": 3, "epochs": 9}) == 3
    # No count, or none that is one: no total, so no ETA.
    assert declared_reports({"lr": 0.1}) is None
    assert declared_reports({"epochs": "5"}) is None and declared_reports({"epochs": True}) is None
    assert declared_reports({"epochs": 0}) is None


def test_a_module_found_that_imports_a_missing_one_names_it_and_the_line_not_pythonpath(userpkg: Path) -> None:
    text = message("job.workload=imports_missing:Net")
    assert f"no module named 'torchvision_extras_xyz', imported at {userpkg / 'imports_missing.py'}:2" in text
    assert "PYTHONPATH" not in text
    # The user's own module not found: where to put it.
    assert "PYTHONPATH" in message("job.workload=nosuch_usermod:Net")
