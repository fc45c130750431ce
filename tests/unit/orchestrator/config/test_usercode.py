"""``job.code_dir``: the user's own code on the clusters, checked offline.

On SkyPilot clusters the folder is a file mount at ``~/sky_code``, its requirements.txt
is installed by the set-up into the runtime's Python, and it comes first on PYTHONPATH
of Ray (so of every worker) and of the runtime driver. The task goes through SkyPilot's
own schema; the set-up and the shell that sets PYTHONPATH run here in bash, against a
fake home and a fake Python; nothing is launched. In the controller, check_user_code
refuses a code_dir that is not a folder and imports the code from it.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.usercode import check_user_code
from orchestrator.errors import ConfigError
from providers.base import ClusterHandle, RegionSpec
from providers.skypilot import slurm
from providers.skypilot.provider import SkyPilotProvider
from providers.skypilot.scripts import CODE_SETUP
from providers.skypilot.sdk import build_task
from providers.skypilot.task import REMOTE_CODE_DIR, task_config
from tests.support.paths import REPO

EXAMPLE = REPO / "examples" / "seqproj"
WORKLOAD = "job.workload=seqmodels.classifier:SeqClassifier"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the example project, somewhere no path points."""
    dest = tmp_path / "proj"
    shutil.copytree(EXAMPLE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """check_user_code edits sys.path and PYTHONPATH, and imports seqmodels: undone after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    for name in [m for m in sys.modules if m == "seqmodels" or m.startswith("seqmodels.")]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [m for m in sys.modules if m == "seqmodels" or m.startswith("seqmodels.")]:
        del sys.modules[name]


def onprem_region(**changes: Any) -> Any:
    rc = compose(["cloud=onprem"]).cloud.regions["slurm-a"]
    for key, value in changes.items():
        setattr(rc, key, value)
    return rc


# --- the task -----------------------------------------------------------------------------


def test_without_code_dir_the_task_is_as_before() -> None:
    rc = onprem_region(setup="echo a shared environment")
    config = task_config("slurm-a", rc, "c", workdir=str(REPO))
    assert "file_mounts" not in config
    assert "ORCH_CODE_DIR" not in config["envs"]
    assert config["setup"] == rc.setup


@pytest.mark.parametrize(("cloud", "region"), [("onprem", "slurm-a"), ("aws", "us-east-1")])
def test_code_dir_is_a_file_mount_that_skypilots_schema_takes(cloud: str, region: str, project: Path) -> None:
    pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")
    from providers.skypilot.sdk import build_task

    rc = compose([f"cloud={cloud}"]).cloud.regions[region]
    config = task_config(region, rc, "c", workdir=str(REPO), code_dir=str(project))
    assert config["file_mounts"] == {"~/sky_code": str(project)}
    assert config["envs"]["ORCH_CODE_DIR"] == REMOTE_CODE_DIR == "~/sky_code"
    # The region's own set-up first (a venv, or on-prem's shared environment), then ours.
    assert config["setup"].startswith(rc.setup or "set -e; python3 -m venv")
    assert config["setup"].endswith(CODE_SETUP)
    task = build_task(config)
    assert task.file_mounts == {"~/sky_code": str(project)}
    assert task.envs["ORCH_CODE_DIR"] == "~/sky_code"


def test_a_relative_code_dir_is_mounted_from_its_absolute_path(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project.parent)
    config = task_config("slurm-a", onprem_region(), "c", workdir=str(REPO), code_dir="proj")
    assert config["file_mounts"] == {"~/sky_code": str(project)}


# --- the set-up on the node -----------------------------------------------------------------


# --- PYTHONPATH on the node -----------------------------------------------------------------


def _launched(provider: SkyPilotProvider, monkeypatch: pytest.MonkeyPatch) -> ClusterHandle:
    """provider.launch with SkyPilot's launch and the wait for Ray stubbed out."""
    monkeypatch.setattr(SkyPilotProvider, "_launch_within", lambda self, *a: None)
    monkeypatch.setattr(SkyPilotProvider, "_wait_ready", lambda self, *a: None)
    return provider.launch(RegionSpec("us-east-1", "s3://b/s", 2), "run-us-east-1-g1", 60.0, env={"A": "1"})


def test_each_cluster_gets_a_ray_token_of_its_own_as_a_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's token auth on SkyPilot clusters: a fresh token per cluster, a SkyPilot secret
    (never one of the task's envs), RAY_AUTH_MODE=token before ray start; gone at teardown."""
    pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")
    provider = SkyPilotProvider(compose(["cloud=aws"]).cloud.regions, out=io.StringIO())
    tasks: list[tuple[dict[str, Any], dict[str, str]]] = []

    def building(config: dict[str, Any], secrets: dict[str, str] | None = None) -> Any:
        tasks.append((config, secrets or {}))
        return build_task(config, secrets)

    monkeypatch.setattr("providers.skypilot.provider.build_task", building)
    first = _launched(provider, monkeypatch)
    second = provider.launch(RegionSpec("us-east-1", "s3://b/s", 2), "run-us-east-1-g2", 60.0)
    (config, secrets), (_, secrets2) = tasks
    token = secrets["RAY_AUTH_TOKEN"]
    assert len(token) == 64 and token != secrets2["RAY_AUTH_TOKEN"]
    assert provider._tokens == {first.name: token, second.name: secrets2["RAY_AUTH_TOKEN"]}
    assert "RAY_AUTH_TOKEN" not in config["envs"] and token not in repr(config) and token not in repr(first.info)
    assert "export RAY_AUTH_MODE=token " in config["run"]
    monkeypatch.setattr(SkyPilotProvider, "_sdk", lambda self, what, fn: None)
    monkeypatch.setattr(slurm, "sweep", lambda info, say, runtime=True: None)
    provider.teardown(first)
    assert first.name not in provider._tokens


def test_a_resumed_controller_derives_the_token_of_a_cluster_it_finds_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tokens from the run's secret: the same cluster, the same token in a new controller
    process; another cluster or another run's secret, another token."""
    pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")
    from recovery.signing import derive_token_key

    regions = compose(["cloud=aws"]).cloud.regions
    first = SkyPilotProvider(regions, out=io.StringIO())
    first.use_token_key(derive_token_key(b"s" * 32, "run"))
    handle = _launched(first, monkeypatch)
    token = first._tokens[handle.name]
    resumed = SkyPilotProvider(regions, out=io.StringIO())
    assert resumed._token(handle.name) is None  # no key: nothing to derive
    resumed.use_token_key(derive_token_key(b"s" * 32, "run"))
    assert resumed._token(handle.name) == token and len(token) == 64
    assert resumed._token("run-us-east-1-g2") != token
    other = SkyPilotProvider(regions, out=io.StringIO())
    other.use_token_key(derive_token_key(b"t" * 32, "run"))
    assert other._token(handle.name) != token


def test_a_cluster_without_code_dir_starts_the_runtime_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")
    provider = SkyPilotProvider(compose(["cloud=aws"]).cloud.regions, out=io.StringIO())
    handle = _launched(provider, monkeypatch)
    assert handle.info["code_dir"] == ""
    config, _ = provider.task_for("us-east-1", "c")
    assert "file_mounts" not in config


# --- the controller's check -------------------------------------------------------------------


def test_a_code_dir_that_is_not_a_folder_is_one_line_naming_the_key(tmp_path: Path, isolated: None) -> None:
    (tmp_path / "file.py").write_text("")
    for bad in (tmp_path / "missing", tmp_path / "file.py"):
        with pytest.raises(ConfigError) as info:
            check_user_code(compose([WORKLOAD, f"job.code_dir={bad}"]))
        assert info.value.key == "job.code_dir"
        assert str(bad) in str(info.value) and "\n" not in str(info.value)


def test_the_controller_imports_the_code_from_code_dir(
    project: Path, isolated: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project.parent)  # not the project: only code_dir leads there
    with pytest.raises(ConfigError) as info:
        check_user_code(compose([WORKLOAD]))
    assert info.value.key == "job.workload"
    cfg = compose([WORKLOAD, "job.code_dir=proj", "job.params.hidden=16"])
    check_user_code(cfg)
    assert cfg.job.code_dir == str(project), "made absolute: a resume finds it from anywhere"
    assert sys.path[0] == str(project)
    with pytest.raises(ConfigError) as info:
        check_user_code(compose([WORKLOAD, "job.code_dir=proj", "job.params.hiden=16"]))
    assert info.value.key == "job.params.hiden"


def test_local_clusters_start_with_code_dir_first_on_pythonpath(project: Path, isolated: None) -> None:
    from providers.base import ClusterHandle
    from providers.registry import get_provider

    cfg = compose([WORKLOAD, f"job.code_dir={project}"])
    check_user_code(cfg)
    provider = get_provider("local", None, cfg.cloud, cfg.job)
    handle = ClusterHandle("c", "local-a", "local", "127.0.0.1:1", {"temp_dir": "/tmp/x"})
    assert provider.cluster_env(handle)["PYTHONPATH"] == f"{project}{os.pathsep}/elsewhere"
    assert get_provider("local", None, cfg.cloud).cluster_env(handle)["PYTHONPATH"] == "/elsewhere"


def test_checking_the_code_leaves_the_controllers_pythonpath_alone(project: Path, isolated: None) -> None:
    check_user_code(compose(["cloud=onprem", WORKLOAD, f"job.code_dir={project}"]))
    assert os.environ["PYTHONPATH"] == "/elsewhere"
    assert sys.path[0] == str(project)


@pytest.mark.parametrize("before", [None, 7])
def test_an_sdk_call_that_fails_leaves_sys_tracebacklimit_as_it_was(
    before: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SkyPilot's UX wrapper sets sys.tracebacklimit to 0 and leaves it there when an
    exception passes; the provider's one gate for SDK calls puts it back, absent or not.
    The value is set here first: an earlier test in this process may have called SkyPilot
    outside the provider and left its 0 behind."""
    from providers.skypilot.provider import SkyPilotProvider

    if before is None:
        monkeypatch.delattr(sys, "tracebacklimit", raising=False)
    else:
        monkeypatch.setattr(sys, "tracebacklimit", before, raising=False)

    def leaky() -> None:
        sys.tracebacklimit = 0
        raise ValueError("not retryable")

    provider = SkyPilotProvider({}, out=io.StringIO())
    with pytest.raises(ValueError):
        provider._sdk("sky.launch", leaky)
    assert getattr(sys, "tracebacklimit", None) == before


# --- metrics.listeners ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("tests.support.listeners.Recorder", "expected 'module:name'"),
        ("tests.support.no_such_listeners:Recorder", "cannot import 'tests.support.no_such_listeners'"),
        ("tests.support.listeners:Nobody", "has no attribute 'Nobody'"),
        ("tests.support.listeners:LISTENED", "is a str; name a class or function"),
    ],
)
def test_a_listener_that_does_not_import_is_one_line_naming_its_entry(spec: str, says: str) -> None:
    from orchestrator.config.usercode import check_listeners

    cfg = compose([f"metrics.listeners=[tests.support.listeners:Recorder,{spec}]"])
    with pytest.raises(ConfigError) as err:
        check_listeners(cfg)
    assert err.value.key == "metrics.listeners[1]" and says in str(err.value)
    check_listeners(compose(["metrics.listeners=[tests.support.listeners:Recorder]"]))
