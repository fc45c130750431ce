"""The SkyPilot provider up to the clouds' boundary, with no credentials and no network:
every conf/cloud config's task through SkyPilot's own schema, the optimizer's choices from
catalog fixtures, SkyPilot's real exception classes classified, the missing-credentials
message, and ``action=plan``. The ``aws`` / ``gcp`` tests launch for real only where
credentials exist."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

sky = pytest.importorskip("sky", reason="SkyPilot is not installed (pip install -e '.[skypilot]')")

from orchestrator.commands.run import check_regions  # noqa: E402
from orchestrator.config.compose import CONF_DIR, compose  # noqa: E402
from orchestrator.errors import ConfigError  # noqa: E402
from providers.base import ProvisionError, ProvisionErrorKind  # noqa: E402
from providers.skypilot.credentials import forwarded_secrets, precheck, split_secrets  # noqa: E402
from providers.skypilot.errors import classify  # noqa: E402
from providers.skypilot.provider import SkyPilotProvider  # noqa: E402
from providers.skypilot.sdk import build_task  # noqa: E402
from providers.skypilot.task import task_config  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "catalogs"
SKY_CLOUDS = sorted(p.stem for p in (CONF_DIR / "cloud").glob("*.yaml") if "provider: skypilot" in p.read_text())


@pytest.fixture
def catalogs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """SkyPilot's runtime dir with the catalog fixtures: a CSV with no .meta md5 beside it
    is never fetched again, so the optimizer works offline."""
    root = tmp_path / "sky-runtime"
    shutil.copytree(FIXTURES, root / ".sky" / "catalogs")
    monkeypatch.setenv("SKY_RUNTIME_DIR", str(root))
    return root


def test_there_are_skypilot_clouds() -> None:
    assert {"aws", "gcp", "onprem", "multi"} <= set(SKY_CLOUDS)


@pytest.mark.parametrize("cloud", SKY_CLOUDS)
def test_every_region_task_passes_skypilots_schema(cloud: str) -> None:
    cfg = compose([f"cloud={cloud}", "job=digits"])
    assert cfg.recovery.provision_timeout_s >= 600, "SkyPilot launches take minutes"
    for region in cfg.candidate_regions():
        rc = cfg.cloud.regions[region]
        config = task_config(region, rc, f"digits-x-{region}-g1", {"OMP_NUM_THREADS": "1"}, workdir=str(REPO))
        task = build_task(config)
        (res,) = task.resources
        assert str(res.cloud).lower() in rc.infra.replace("k8s", "kubernetes").lower()
        if not rc.infra.startswith("slurm/"):
            assert res.region == rc.infra.split("/", 1)[1], "the region is pinned"
        assert task.num_nodes == rc.num_nodes
        assert task.envs["ORCH_REGION"] == region
        assert "-m providers.raystart start --no-ray-client" in task.run and '"${ray_start[@]}" --head' in task.run


def test_skypilots_schema_rejects_a_bad_task() -> None:
    cfg = compose(["cloud=aws"])
    config = task_config("us-east-1", cfg.cloud.regions["us-east-1"], "c", workdir=str(REPO))
    config["nodes"] = 2
    with pytest.raises(Exception, match="num_nodes"):
        build_task(config)


def test_command_line_overrides_reach_the_task() -> None:
    cfg = compose(["cloud=aws", "cloud.regions.us-east-1.accelerators=A10G:1", "trainer.workers=4"])
    rc = cfg.cloud.regions["us-east-1"]
    (res,) = build_task(task_config("us-east-1", rc, "c", workdir=str(REPO))).resources
    assert res.accelerators == {"A10G": 1}
    assert cfg.trainer.workers == 4


def test_a_bad_infra_is_refused_with_the_key() -> None:
    with pytest.raises(ConfigError, match=r"cloud\.regions\.us-east-1\.infra: got 'azure/eastus'"):
        check_regions(compose(["cloud=aws", "cloud.regions.us-east-1.infra=azure/eastus"]))


def test_secrets_never_in_envs_or_plan(monkeypatch: pytest.MonkeyPatch, catalogs: Path) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    envs, secrets = split_secrets({"OMP_NUM_THREADS": "1", "HF_TOKEN": "tok-value"}, forwarded_secrets(["s3://b/x"]))
    assert envs == {"OMP_NUM_THREADS": "1"}
    assert secrets == {
        "HF_TOKEN": "tok-value",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
        "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    }
    cfg = compose(["cloud=aws"])
    provider = SkyPilotProvider(cfg.cloud.regions)
    config, secrets = provider.task_for("us-east-1", "c", {"HF_TOKEN": "tok-value"})
    task = build_task(config, secrets)
    assert task.secrets["HF_TOKEN"].get_secret_value() == "tok-value"
    assert "HF_TOKEN" not in task.envs and "AWS_SECRET_ACCESS_KEY" not in task.envs
    assert "s3cr3t-value" not in repr(config) and "tok-value" not in repr(config)


# --- the optimizer on catalog fixtures ----------------------------------------------------


_OPTIMIZE = """
import json, sys
from orchestrator.config.compose import compose
from providers.skypilot.plan import optimize_task, plan_clouds
from providers.skypilot.task import task_config
overrides, resources = json.loads(sys.argv[1])
cfg = compose(overrides)
config = task_config("r", cfg.cloud.regions["us-east-1"], "c", workdir=".")
config["resources"].update(resources)
with plan_clouds({"AWS"}):
    best = optimize_task(config)
print(json.dumps([best.region, best.instance_type, best.get_cost(3600)]))
"""


def _optimize(catalogs: Path, overrides: list[str], resources: dict[str, object]) -> list[object]:
    """SkyPilot's optimizer in a fresh process (its catalog paths are fixed at import)."""
    import json

    proc = subprocess.run(
        [sys.executable, "-c", _OPTIMIZE, json.dumps([overrides, resources])],
        cwd=REPO,
        env={**os.environ, "SKY_RUNTIME_DIR": str(catalogs)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_optimizer_picks_the_cheapest_region_from_the_catalog(catalogs: Path) -> None:
    # Any AWS region, spot: m6i.xlarge is cheapest in us-west-2 in the fixture (0.0702 $/h).
    region, instance, cost = _optimize(catalogs, ["cloud=aws"], {"infra": "aws", "use_spot": True})
    assert (region, instance) == ("us-west-2", "m6i.xlarge")
    assert cost == pytest.approx(0.0702)


def test_optimizer_finds_the_accelerator_and_its_price(catalogs: Path) -> None:
    region, instance, cost = _optimize(
        catalogs,
        ["cloud=aws", "cloud.regions.us-east-1.accelerators=A10G:1", "cloud.regions.us-east-1.instance_type="],
        {"infra": "aws/us-east-1"},
    )
    assert (region, instance) == ("us-east-1", "g5.xlarge")
    assert cost == pytest.approx(1.006)


def test_plan_multi_prints_placements_and_writes_tasks_sky_accepts(catalogs: Path, tmp_path: Path) -> None:
    import yaml

    home = tmp_path / "home"
    env = {**os.environ, "SKY_RUNTIME_DIR": str(catalogs), "ORCHESTRATOR_HOME": str(home)}
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        env.pop(k, None)
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "job=digits", "cloud=multi", "action=plan", "run_id=plan1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    rows = [line.split() for line in lines if line[:1].isdigit()]
    assert [r[1] for r in rows] == ["us-east-1", "us-west-2", "us-central1", "europe-west4"]
    assert [r[3] for r in rows] == ["m6i.xlarge", "m6i.xlarge", "n2-standard-4", "n2-standard-4"]
    assert [float(r[6]) for r in rows] == pytest.approx([0.192, 0.192, 0.194236, 0.21366], abs=1e-4)
    assert "AWS: SkyPilot cannot use AWS" in proc.stdout
    plan_dir = home / "plans" / "plan1"
    files = sorted(plan_dir.glob("*.yaml"))
    assert [f.name for f in files] == [
        "01-us-east-1.yaml",
        "02-us-west-2.yaml",
        "03-us-central1.yaml",
        "04-europe-west4.yaml",
    ]
    for f in files:
        task = sky.Task.from_yaml_config(yaml.safe_load(f.read_text()))
        assert task.num_nodes == 1
    assert not (home / "clusters").exists(), "a plan launches nothing"
    # A plan is no run: nothing under runs/, so action=list has no row for it.
    assert not (home / "runs").exists()
    listed = subprocess.run(
        [sys.executable, "-m", "orchestrator", "action=list"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert listed.returncode == 0 and "plan1" not in listed.stdout + listed.stderr, listed


def test_a_plan_on_the_local_provider_is_its_own_and_imports_no_skypilot(tmp_path: Path) -> None:
    """action=plan asks the run's provider: the local one lists its clusters at no cost,
    without SkyPilot's import (python -X importtime names every module imported)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "orchestrator", "action=plan", f"home={tmp_path}", "run_id=p"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("plan p: job digits on local, placements in failover order\n")
    assert "$0/hour" in proc.stdout
    assert not [line for line in proc.stderr.splitlines() if line.rstrip().endswith(("| sky", "| providers.skypilot"))]
    assert not (tmp_path / "plans").exists() and not (tmp_path / "clusters").exists()


# --- errors ----------------------------------------------------------------------------


def test_classification_of_skypilots_exceptions() -> None:
    from sky import exceptions as e

    no_room = e.ResourcesUnavailableError("Failed to acquire resources in us-east-1: InsufficientInstanceCapacity")
    assert classify(no_room).kind is ProvisionErrorKind.NO_CAPACITY
    creds = e.ResourcesUnavailableError(
        "Failed to provision", failover_history=[e.InvalidCloudCredentials("AWS credentials are not set")]
    )
    c = classify(creds)
    assert c.kind is ProvisionErrorKind.PRECHECK and "AWS credentials are not set" in c.message
    quota = e.ResourcesUnavailableError("VcpuLimitExceeded: You have requested more vCPU capacity than your quota")
    assert classify(quota).kind is ProvisionErrorKind.PRECHECK
    assert classify(e.ProvisionPrechecksError([ValueError("bad")])).kind is ProvisionErrorKind.PRECHECK
    assert classify(e.NoCloudAccessError("no cloud")).kind is ProvisionErrorKind.PRECHECK
    assert classify(e.CloudUserIdentityError("who")).kind is ProvisionErrorKind.PRECHECK
    assert classify(e.ClusterSetUpError("setup failed")).kind is ProvisionErrorKind.TRANSIENT
    assert classify(e.ApiServerConnectionError("http://127.0.0.1:46580")).kind is ProvisionErrorKind.TRANSIENT
    assert classify(e.CommandError(255, "ssh", "ssh failed", None)).kind is ProvisionErrorKind.TRANSIENT


def test_transient_sdk_errors_are_retried_in_one_place(monkeypatch: pytest.MonkeyPatch) -> None:
    from sky import exceptions as e

    import providers.skypilot.sdk as sdk

    monkeypatch.setattr(sdk, "SDK_BACKOFF_S", 0.0)
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise e.ApiServerConnectionError("http://127.0.0.1:1")
        return "ok"

    assert SkyPilotProvider({})._sdk("status", flaky) == "ok" and len(calls) == 3

    def precheck_fails() -> str:
        calls.append(1)
        raise e.InvalidCloudCredentials("no")

    calls.clear()
    with pytest.raises(e.InvalidCloudCredentials):
        SkyPilotProvider({})._sdk("launch", precheck_fails)
    assert len(calls) == 1, "a precheck failure is never retried"


def _no_aws(env: dict[str, str], home: Path) -> dict[str, str]:
    env = {k: v for k, v in env.items() if not k.startswith("AWS_")}
    env.update(
        {
            "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"),
            "AWS_CONFIG_FILE": str(home / "none"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "ORCHESTRATOR_HOME": str(home),
        }
    )
    return env


def test_missing_aws_credentials_one_message_exit_2_nothing_launched(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "job=digits", "cloud=aws", "run_id=nocreds"],
        cwd=REPO,
        env=_no_aws(dict(os.environ), tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("error: cloud.regions.us-east-1: SkyPilot cannot use AWS (aws/us-east-1): ")
    assert "AWS credentials are not set" in errors[0] and "nothing was launched" in errors[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "clusters").exists() and not (tmp_path / "runs" / "nocreds" / "journal.jsonl").exists()


def test_precheck_raises_precheck_kind(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for k, v in _no_aws({}, tmp_path).items():
        monkeypatch.setenv(k, v)
    for k in [k for k in os.environ if k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE")]:
        monkeypatch.delenv(k)
    cfg = compose(["cloud=aws"])
    with pytest.raises(ProvisionError) as info:
        precheck(cfg.cloud.regions)
    assert info.value.kind is ProvisionErrorKind.PRECHECK and info.value.region == "us-east-1"


# --- real launches, where credentials exist ---------------------------------------------------


def _credentials(cloud: str) -> str | None:
    """None when SkyPilot can use the cloud, else why not."""
    from sky import clouds

    ok, reason = getattr(clouds, cloud).check_credentials(clouds.CloudCapability.COMPUTE)
    return None if ok else " ".join(str(reason).split())[:200]


@pytest.mark.aws
def test_aws_launch_and_teardown(tmp_path: Path) -> None:
    why = _credentials("AWS")
    if why:
        pytest.skip(f"no AWS credentials here: {why}")
    _launch_and_teardown("aws", "us-east-1", tmp_path)


@pytest.mark.gcp
def test_gcp_launch_and_teardown(tmp_path: Path) -> None:
    why = _credentials("GCP")
    if why:
        pytest.skip(f"no GCP credentials here: {why}")
    _launch_and_teardown("gcp", "us-central1", tmp_path)


def _launch_and_teardown(cloud: str, region: str, tmp_path: Path) -> None:
    from providers.base import RegionSpec
    from recovery.detection import Health

    cfg = compose([f"cloud={cloud}"])
    provider = SkyPilotProvider(cfg.cloud.regions, state_dir=str(tmp_path / "clusters"))
    rc = cfg.cloud.regions[region]
    handle = provider.launch(RegionSpec(region, rc.store, rc.num_cpus), f"orch-test-{cloud}", 1800)
    try:
        assert provider.health(handle).health is Health.UP
    finally:
        provider.teardown(handle)
    provider.teardown(handle)  # idempotent
    assert provider.find(handle.name) is None


def test_commands_reach_the_head_inside_a_slurm_allocation() -> None:
    from providers.base import ClusterHandle
    from providers.skypilot.ssh import remote

    slurm = ClusterHandle("c", "r", "skypilot", "127.0.0.1:1", {"infra": "slurm/a", "name_on_cloud": "c-1234abcd"})
    cmd = remote(slurm, "python -V")
    assert "srun --unbuffered --overlap" in cmd and '--name="$name"' in cmd and "exit 97" in cmd
    assert cmd.startswith("name=c-1234abcd;")
    vm = ClusterHandle("c", "r", "skypilot", "127.0.0.1:1", {"infra": "aws/us-east-1", "name_on_cloud": "c-1"})
    assert remote(vm, "python -V") == "cd ~/sky_workdir; python -V"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("cloud.regions.us-east-1.num_nodes=0", "cloud.regions.us-east-1.num_nodes"),
        ("cloud.regions.us-east-1.disk_size=-1", "cloud.regions.us-east-1.disk_size"),
        ("cloud.regions.us-east-1.accelerators='A10G x1'", "cloud.regions.us-east-1.accelerators"),
    ],
)
def test_bad_region_values_name_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_regions(compose(["cloud=aws", override]))
    assert info.value.key == key


def test_skypilots_log_is_shown_line_by_line() -> None:
    import io

    from providers.skypilot.sdk import Prefixed

    out = io.StringIO()
    stream = Prefixed(out)
    stream.write("\x1b[32m✓ Cluster launched\x1b[0m\nSyncing")
    stream.write(" files.\n\n")
    assert out.getvalue() == "skypilot: ✓ Cluster launched\nskypilot: Syncing files.\n"
