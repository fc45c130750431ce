"""compose(): command-line overrides to a validated, typed Config, or a ConfigError naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.compose import _settle_code, compose
from orchestrator.config.schema import Config, FaultConfig
from orchestrator.errors import ConfigError

REGIONS = ["local-a", "local-b", "local-c"]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path))
    return tmp_path


def config_error(overrides: list[str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        compose(overrides)
    return info.value


# --- defaults -------------------------------------------------------------------------------


def test_defaults_are_the_digits_job_on_three_local_regions_in_preference_order() -> None:
    cfg = compose([])
    assert isinstance(cfg, Config)
    assert (cfg.job.name, cfg.job.workload, cfg.job.steps) == ("digits", "digits", 500)
    assert cfg.cloud.provider == "local"
    assert list(cfg.cloud.regions) == REGIONS
    assert cfg.candidate_regions() == REGIONS
    assert (cfg.action, cfg.run_id, cfg.chaos.faults) == ("run", None, [])


def test_default_stores_are_file_urls_under_orchestrator_home(home: Path) -> None:
    cfg = compose([])
    assert cfg.home == str(home)
    assert {n: r.store for n, r in cfg.cloud.regions.items()} == {n: f"file://{home}/stores/{n}" for n in REGIONS}


def test_without_orchestrator_home_stores_live_under_dot_orchestrator_in_the_user_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORCHESTRATOR_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    cfg = compose([])
    assert cfg.home == f"{tmp_path}/user/.orchestrator"
    assert cfg.cloud.regions["local-b"].store == f"file://{tmp_path}/user/.orchestrator/stores/local-b"


def test_home_override_moves_every_store(tmp_path: Path) -> None:
    # Under tmp_path: a home must be a folder this user may write (or create), which /x is not for most.
    cfg = compose([f"home={tmp_path}/x"])
    assert cfg.home == f"{tmp_path}/x"
    assert [r.store for r in cfg.cloud.regions.values()] == [f"file://{tmp_path}/x/stores/{n}" for n in REGIONS]


def test_chaos_fault_list_on_the_command_line_parses_to_typed_faults() -> None:
    cfg = compose(["chaos.faults=[{kind:kill_region,at_step:60}]"])
    assert cfg.chaos.faults == [FaultConfig(kind="kill_region", at_step=60)]


def test_status_flap_and_ssh_drop_compose_from_the_command_line_and_reach_the_runtimes_spec() -> None:
    from orchestrator.wire.codec import to_plain
    from orchestrator.wire.sections import FaultSpec

    cfg = compose(["chaos.faults=[{kind:status_flap,at_step:5,count:3},{kind:ssh_drop,after_s:2}]"])
    assert cfg.chaos.faults == [
        FaultConfig(kind="status_flap", at_step=5, count=3),
        FaultConfig(kind="ssh_drop", after_s=2.0),
    ]
    specs = [FaultSpec.from_plain(to_plain(f), f"faults[{i}]") for i, f in enumerate(cfg.chaos.faults)]
    assert [(str(f.kind), f.count) for f in specs] == [("status_flap", 3), ("ssh_drop", 1)]


def test_fault_on_the_last_step_of_the_job_is_allowed() -> None:
    cfg = compose(["job.steps=60", "chaos.faults=[{kind:corrupt_checkpoint,at_step:60}]"])
    assert cfg.chaos.faults[0].at_step == cfg.job.steps


def test_status_with_a_run_id_composes() -> None:
    cfg = compose(["action=status", "run_id=digits-1"])
    assert (cfg.action, cfg.run_id) == ("status", "digits-1")


def test_more_cpus_per_region_admits_more_workers() -> None:
    cfg = compose(["trainer.workers=3", *(f"cloud.regions.{n}.num_cpus=3" for n in REGIONS)])
    assert cfg.trainer.workers == 3


# --- errors name the key --------------------------------------------------------------------


def test_typo_in_a_key_names_the_typo_and_suggests_the_real_key() -> None:
    err = config_error(["trainer.wrkers=3"])
    assert err.key == "trainer.wrkers"
    assert "did you mean 'trainer.workers'" in str(err)


def test_typo_in_a_fault_field_names_it_and_suggests_at_step() -> None:
    err = config_error(["chaos.faults=[{kind:kill_region,atstep:60}]"])
    assert err.key.endswith("atstep")
    assert "at_step" in str(err)


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        (
            "chaos.faults=[{kind:status_flap,at_step:5,count:0}]",
            "chaos.faults[0].count",
            "got 0; expected an integer >= 1",
        ),
        ("recovery.health_failures_to_lose=0", "recovery.health_failures_to_lose", "got 0; expected an integer >= 1"),
        ("chaos.faults=[{kind:ssh_drop,during:provisioning}]", "chaos.faults[0].during", "needs a running attempt"),
    ],
)
def test_a_bad_hysteresis_count_or_flap_names_its_key(override: str, key: str, words: str) -> None:
    err = config_error([override])
    assert err.key == key and words in str(err) and "\n" not in str(err)


def test_value_of_the_wrong_type_names_the_key_and_the_expected_type() -> None:
    err = config_error(["trainer.workers=abc"])
    assert err.key == "trainer.workers"
    assert "'abc'" in str(err)
    assert "integer" in str(err)


def test_zero_workers_is_rejected() -> None:
    err = config_error(["trainer.workers=0"])
    assert err.key == "trainer.workers"
    assert ">= 1" in str(err)


def test_unknown_cloud_names_the_group_and_lists_the_known_ones() -> None:
    err = config_error(["cloud=foo"])
    assert err.key == "cloud"
    assert "'foo'" in str(err)
    assert "local" in str(err).split("allowed:", 1)[1]


def test_unknown_job_names_the_group_and_lists_the_known_ones() -> None:
    err = config_error(["job=nope"])
    assert err.key == "job"
    assert "'nope'" in str(err)
    assert "digits" in str(err).split("allowed:", 1)[1]


def test_unknown_region_in_candidates_is_named_with_the_regions_allowed() -> None:
    err = config_error(["cloud.candidates=[local-a,local-z]"])
    assert err.key == "cloud.candidates"
    assert "'local-z'" in str(err)
    assert "local-a, local-b, local-c" in str(err)


def test_region_listed_twice_in_candidates_is_rejected() -> None:
    err = config_error(["cloud.candidates=[local-a,local-a]"])
    assert err.key == "cloud.candidates"
    assert "twice" in str(err)


def test_checkpoint_interval_of_zero_is_rejected() -> None:
    err = config_error(["checkpoint.interval_steps=0"])
    assert err.key == "checkpoint.interval_steps"


def test_keeping_only_one_checkpoint_is_rejected_because_a_corrupt_one_needs_a_fallback() -> None:
    err = config_error(["checkpoint.keep_last=1"])
    assert err.key == "checkpoint.keep_last"
    assert ">= 2" in str(err)


def test_unknown_fault_kind_names_the_fault_and_lists_the_kinds() -> None:
    err = config_error(["chaos.faults=[{kind:explode,at_step:5}]"])
    assert err.key == "chaos.faults[0].kind"
    assert "kill_region" in str(err)


def test_fault_after_the_last_step_names_at_step_and_job_steps() -> None:
    err = config_error(["job.steps=50", "chaos.faults=[{kind:kill_region,at_step:60}]"])
    assert err.key == "chaos.faults[0].at_step"
    assert "1..50" in str(err)


def test_unknown_top_level_key_is_named() -> None:
    err = config_error(["bogus=1"])
    assert err.key == "bogus"
    assert "top level" in str(err)


def test_status_without_a_run_id_asks_for_run_id() -> None:
    err = config_error(["action=status"])
    assert err.key == "run_id"


def test_more_workers_than_any_region_fits_names_trainer_workers_and_the_largest_region() -> None:
    err = config_error(["trainer.workers=3"])
    assert err.key == "trainer.workers"
    assert "the largest, 'local-a', has 1 node(s) of 2 CPUs" in str(err)
    # Nodes count: two nodes of 2 CPUs fit the three workers.
    assert compose(["trainer.workers=3", "cloud.regions.local-a.nodes=2"]).trainer.workers == 3


def test_a_region_too_small_for_the_run_is_left_to_the_policy_when_another_fits() -> None:
    # The failover skips it (and journals why); only a run no candidate fits is refused.
    small_a = ["trainer.workers=3", "cloud.regions.local-b.num_cpus=3", "cloud.regions.local-c.num_cpus=3"]
    assert compose(small_a).candidate_regions() == ["local-a", "local-b", "local-c"]
    assert config_error([*small_a, "cloud.candidates=[local-a]"]).key == "trainer.workers"


def test_min_workers_bounds_and_what_an_elastic_world_needs() -> None:
    assert compose(["trainer.min_workers=1"]).trainer.min_world() == 1
    assert compose([]).trainer.min_world() == 2
    assert config_error(["trainer.min_workers=3"]).key == "trainer.min_workers"
    assert config_error(["trainer.min_workers=-1"]).key == "trainer.min_workers"
    # One worker fits in 1-CPU regions: an elastic run may start there, a fixed one not.
    one_cpu = [f"cloud.regions.{r}.num_cpus=1" for r in ("local-a", "local-b", "local-c")]
    assert compose([*one_cpu, "trainer.min_workers=1"]).trainer.workers == 2
    assert config_error(one_cpu).key == "trainer.workers"
    err = config_error(["trainer.min_workers=1", "data.loader=ray_data"])
    assert err.key == "trainer.min_workers" and "data.loader=sharded" in str(err)


def test_nodes_and_num_nodes_name_one_count() -> None:
    cfg = compose(["cloud.regions.local-a.nodes=2"])
    assert cfg.cloud.regions["local-a"].node_count() == 2
    assert config_error(["cloud.regions.local-a.nodes=2", "cloud.regions.local-a.num_nodes=3"]).key == (
        "cloud.regions.local-a.nodes"
    )
    assert config_error(["cloud.regions.local-a.nodes=0"]).key == "cloud.regions.local-a.nodes"
    assert config_error(["recovery.node_replace_timeout_s=-1"]).key == "recovery.node_replace_timeout_s"


# --- keys added with '+' and unknown regions ---------------------------------------------


def test_typo_added_with_plus_is_a_config_error_naming_the_key() -> None:
    err = config_error(["+trainer.wrkers=3"])
    assert err.key == "trainer.wrkers"


def test_top_level_key_added_with_plus_is_a_config_error_not_silently_dropped() -> None:
    err = config_error(["+bogus=1"])
    assert err.key == "bogus"


def test_unknown_region_key_lists_the_region_names_as_allowed() -> None:
    err = config_error(["cloud.regions.local-z.num_cpus=1"])
    assert err.key == "cloud.regions.local-z"
    assert "local-a" in str(err)


def test_cloud_configs_put_the_control_channel_where_their_clusters_reach_it(tmp_path) -> None:
    from orchestrator.control.wiring import control_url

    local = compose(["cloud=local"])
    assert local.cloud.control_store is None
    assert control_url(local, "r1", str(tmp_path)) == f"file://{tmp_path}/control"
    aws = compose(["cloud=aws"])
    assert aws.cloud.control_store == "s3://orch-checkpoints-us-east-1/control"
    assert control_url(aws, "r1", str(tmp_path)) == "s3://orch-checkpoints-us-east-1/control/r1/control"
    with pytest.raises(ConfigError) as err:
        compose(["cloud.control_store=/not/a/url"])
    assert err.value.key == "cloud.control_store"
    with pytest.raises(ConfigError) as err:
        compose(["+cloud.control_options.secret=x"])
    assert err.value.key == "cloud.control_options.secret"


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        # The user's code names the run, over the default job's name and a chosen job config's.
        (["job.workload=mymod:Net"], "net"),
        (["hpo.enabled=true", "job.workload=mymod:Net"], "net"),
        (["job=digits_hpo", "job.workload=mymod:Net"], "net"),
        (["job=digits_hpo", "job.train_func=pkg.train:train_loop"], "train_loop"),
        # Unless the command line names the job too.
        (["job=digits_hpo", "job.workload=mymod:Net", "job.name=mine"], "digits_hpo"),
        # A job config with no code on the command line keeps its name.
        (["job=digits_hpo"], "digits_hpo"),
    ],
)
def test_a_run_over_the_users_code_is_named_after_it(overrides: list[str], name: str) -> None:
    # The job as Hydra composed it: the config's, with the command line's job.* set (job.name
    # left as the config's here, to show that _settle_code leaves a given one be).
    job = {"name": "digits_hpo", "workload": "digits", "train_func": ""}
    job |= {
        k[len("job.") :]: v
        for k, _, v in (o.partition("=") for o in overrides)
        if k in ("job.workload", "job.train_func")
    }
    _settle_code(job, overrides)
    assert job["name"] == name
