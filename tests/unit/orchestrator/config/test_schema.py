"""Every input checked before anything is written or launched: names, numbers, store URLs,
home and Hydra settings. Each refusal is one ConfigError naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config.checks import MAX_BATCH_SIZE, MAX_HIDDEN_SIZE, MAX_RUN_ID, MAX_STEPS
from orchestrator.config.compose import compose
from orchestrator.config.saved import config_from_plain
from orchestrator.config.validate import _validate_name
from orchestrator.config.validate_cloud import _validate_url
from orchestrator.errors import ConfigError
from orchestrator.wire.codec import to_plain
from orchestrator.wire.sections import MAX_SEED


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "home"


def refused(overrides: list[str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        compose(overrides)
    assert "\n" not in str(info.value)
    return info.value


# --- names ----------------------------------------------------------------------------------

BAD_NAMES = ["../x", "/tmp/x", "a/b", ".", "..", ".hidden", "-rf", "a b", "a\nb", "é", "x;y", "a" * (MAX_RUN_ID + 1)]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_that_is_no_plain_name_is_refused(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        _validate_name("run_id", name, MAX_RUN_ID)
    assert info.value.key == "run_id"
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("action", ["run", "status", "report", "resume", "plan", "list"])
def test_a_run_id_that_is_a_path_is_refused_for_every_action(action: str) -> None:
    assert refused([f"action={action}", "run_id='../../x'"]).key == "run_id"


def test_a_long_run_id_is_shown_cut_short() -> None:
    err = refused(["run_id=" + "a" * 500])
    assert "(500 characters)" in str(err)
    assert len(str(err)) < 300


@pytest.mark.parametrize("name", ["../../x", "", "a/b", "-x", "a" * 65])
def test_a_job_name_that_is_no_plain_name_is_refused(name: str) -> None:
    assert refused([f"job.name='{name}'"]).key == "job.name"


@pytest.mark.parametrize("name", ["digits-20261130-120000-ab12", "A.b_c-1", "9lives"])
def test_plain_names_pass(name: str) -> None:
    cfg = compose([f"run_id={name}", f"job.name={name[:64]}"])
    assert cfg.run_id == name


def test_a_name_made_from_the_code_starts_with_a_letter_or_digit() -> None:
    cfg = compose(["job.workload=orchestrator.workloads.digits:_Private"])
    assert cfg.job.name == "private"


# --- numbers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("job.steps=0", "job.steps"),
        (f"job.steps={MAX_STEPS + 1}", "job.steps"),
        ("job.steps=100000000000000000000", "job.steps"),
        ("job.steps=1e20", "job.steps"),
        (f"job.batch_size={MAX_BATCH_SIZE + 1}", "job.batch_size"),
        ("job.batch_size=-1", "job.batch_size"),
        (f"job.hidden_size={MAX_HIDDEN_SIZE + 1}", "job.hidden_size"),
        ("job.hidden_size=0", "job.hidden_size"),
        ("job.lr=inf", "job.lr"),
        ("job.lr=-inf", "job.lr"),
        ("job.lr=nan", "job.lr"),
        ("job.lr=0", "job.lr"),
        ("job.seed=-1", "job.seed"),
        (f"job.seed={MAX_SEED + 1}", "job.seed"),
        ("trainer.max_worker_restarts=9223372036854775808", "trainer.max_worker_restarts"),
        ("recovery.region_cooldown_s=inf", "recovery.region_cooldown_s"),
        ("chaos.faults=[{kind:kill_region,random:{seed:-3,rate:0.1}}]", "chaos.faults[0].random.seed"),
    ],
)
def test_numbers_out_of_bounds_are_refused(override: str, key: str) -> None:
    assert refused([override]).key == key


def test_numbers_within_bounds_pass() -> None:
    cfg = compose(
        [f"job.steps={MAX_STEPS}", f"job.seed={MAX_SEED}", "job.lr=1e-6", f"job.hidden_size={MAX_HIDDEN_SIZE}"]
    )
    assert (cfg.job.steps, cfg.job.seed, cfg.job.hidden_size) == (MAX_STEPS, MAX_SEED, MAX_HIDDEN_SIZE)


# --- store URLs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("memory://x", "memory://"),
        ("file://relative", "absolute path"),
        ("file://", "absolute path"),
        ("/abs/path", "expected a URL"),
        ("ftp://host/x", "expected a URL"),
        ("s3://", "bucket"),
        ("s3://user:hunter2@bucket/x", "user name or password"),
        ("gs://hunter2@bucket/x", "user name or password"),
    ],
)
def test_store_urls_must_be_absolute_supported_and_without_credentials(url: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        _validate_url("k", url, "s3://b/p")
    assert words in str(info.value)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("key", ["cloud.regions.local-a.store", "cloud.control_store"])
@pytest.mark.parametrize("url", ["memory://x", "file://relative", "s3://u:hunter2@b/x"])
def test_the_store_and_the_control_store_are_checked_by_their_keys(key: str, url: str) -> None:
    err = refused([f"{key}='{url}'"])
    assert err.key == key
    assert "hunter2" not in str(err)


def test_file_urls_under_the_user_home_name_one_place(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    cfg = compose(["cloud.regions.local-a.store='file://~/s'", "cloud.control_store='file://~/c'"])
    assert cfg.cloud.regions["local-a"].store == f"file://{tmp_path}/user/s"
    assert cfg.cloud.control_store == f"file://{tmp_path}/user/c"


# --- home -----------------------------------------------------------------------------------


def test_an_empty_home_is_refused_rather_than_put_at_the_filesystem_root() -> None:
    err = refused(["home="])
    assert err.key == "home"
    assert "empty" in str(err)


def test_an_empty_orchestrator_home_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_HOME", "")
    assert refused([]).key == "home"


@pytest.mark.parametrize("action", ["run", "status"])
def test_a_home_that_is_a_file_or_lies_under_one_is_refused(tmp_path: Path, action: str) -> None:
    (tmp_path / "afile").write_text("x")
    for home in (tmp_path / "afile", tmp_path / "afile" / "below"):
        err = refused([f"home={home}", f"action={action}", "run_id=r1"])
        assert err.key == "home"
        assert "file" in str(err)


def test_a_relative_home_is_made_absolute_before_the_stores_are(tmp_path: Path) -> None:
    cfg = compose(["home=rel"])
    assert cfg.home == str(tmp_path / "rel")
    assert cfg.cloud.regions["local-a"].store == f"file://{tmp_path}/rel/stores/local-a"


def test_a_relative_orchestrator_home_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_HOME", "rel2")
    cfg = compose([])
    assert cfg.cloud.regions["local-b"].store == f"file://{tmp_path}/rel2/stores/local-b"


def test_nothing_is_created_while_checking_home(tmp_path: Path) -> None:
    compose([f"home={tmp_path}/new/deeper"])
    assert not (tmp_path / "new").exists()


# --- what the command does not honour -------------------------------------------------------


@pytest.mark.parametrize(
    "override", ["hydra.run.dir=/tmp/x", "hydra.job.chdir=true", "+hydra.foo=1", "hydra.verbose=true", "hydra=x"]
)
def test_hydra_settings_the_command_does_not_honour_are_refused(override: str) -> None:
    err = refused([override])
    assert err.key == override.partition("=")[0].lstrip("+")
    assert "does not honour" in str(err)


@pytest.mark.parametrize("flag", ["--multirun", "-m", "--cfg=job", "--info"])
def test_compose_takes_no_option(flag: str) -> None:
    # The command line's options are taken off before (orchestrator/config/cli.py); one that
    # reaches compose is named, never read as an override.
    err = refused([flag])
    assert err.key == flag.partition("=")[0]


# --- a config read back for a resume --------------------------------------------------------


def saved() -> dict[str, object]:
    return json.loads(json.dumps(to_plain(compose(["run_id=r1"]))))


def test_a_saved_config_reads_back() -> None:
    assert config_from_plain(saved()).run_id == "r1"


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda d: d["job"].update(steps="abc"), "job.steps"),
        (lambda d: d["job"].update(steps=True), "job.steps"),
        (lambda d: d["job"].update(lr=None), "job.lr"),
        (lambda d: d.pop("cloud"), "cloud"),
        (lambda d: d.update(job=[1]), "job"),
        (lambda d: d.update(bogus=1), "bogus"),
        (lambda d: d["cloud"]["regions"]["local-a"].update(store="memory://x"), "cloud.regions.local-a.store"),
        (lambda d: d.update(home=""), "home"),
        (lambda d: d["chaos"].update(faults="x"), "chaos.faults"),
    ],
)
def test_an_edited_saved_config_is_refused_by_key(edit, key: str) -> None:
    d = saved()
    edit(d)
    with pytest.raises(ConfigError) as info:
        config_from_plain(d)
    assert info.value.key == key


def test_a_saved_config_that_is_no_mapping_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        config_from_plain([1, 2])
    assert info.value.key == "config"


@pytest.mark.parametrize(
    ("overrides", "key"),
    [(["job.steps=[1"], "job.steps"), (["run_id=x", "job.name=${oops"], "job.name"), (["digits"], "digits")],
)
def test_an_override_hydra_cannot_parse_is_named_by_its_key(overrides: list[str], key: str) -> None:
    assert refused(overrides).key == key


def test_a_home_given_by_interpolation_is_left_to_hydra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_TEST_HOME", str(tmp_path / "h"))
    cfg = compose(["home=${oc.env:ORCH_TEST_HOME}"])
    assert cfg.cloud.regions["local-a"].store == f"file://{tmp_path}/h/stores/local-a"


# --- notifications --------------------------------------------------------------------------

SECRET = "hunter2"


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        (f"notify.webhook='ftp://hooks.example.com/{SECRET}'", "notify.webhook", "scheme 'ftp'"),
        (f"notify.webhook='file:///tmp/{SECRET}'", "notify.webhook", "scheme 'file'"),
        (f"notify.webhook='hooks.example.com/services/{SECRET}'", "notify.webhook", "no absolute URL"),
        ("notify.webhook=''", "notify.webhook", "empty"),
        (f"notify.webhook='https://bot:{SECRET}@hooks.example.com/x'", "notify.webhook", "user name or password"),
        (f"notify.webhook='https://hooks.example.com:99999/{SECRET}'", "notify.webhook", "Port out of range"),
        (f"notify.webhook='http://[::1/{SECRET}'", "notify.webhook", "no URL that can be read"),
        (f"notify.webhook='https://hooks.example.com/a {SECRET}'", "notify.webhook", "space"),
        ("notify.command=''", "notify.command", "empty"),
        ("notify.command='   '", "notify.command", "empty"),
        (f'notify.command="notify.sh --token \'{SECRET}"', "notify.command", "No closing quotation"),
        ("notify.timeout_s=-1", "notify.timeout_s", "> 0"),
        ("notify.timeout_s=0", "notify.timeout_s", "> 0"),
        ("notify.timeout_s=inf", "notify.timeout_s", "finite"),
        ("notify.timeout_s=3600", "notify.timeout_s", "at most 60"),
        ("notify.timeout_s=soon", "notify.timeout_s", "a number"),
        ("notify.webhook=[1]", "notify.webhook", "a string"),
        ("notify.hook=x", "notify.hook", "allowed under 'notify': command, webhook, timeout_s"),
    ],
)
def test_a_notifier_that_could_never_work_is_refused_by_its_key_without_its_secret(
    override: str, key: str, words: str
) -> None:
    err = refused([override])
    assert err.key == key
    assert words in str(err)
    assert SECRET not in str(err)


def test_notifications_are_off_by_default_and_take_a_url_with_a_token_and_a_command_line() -> None:
    assert to_plain(compose([]).notify) == {"command": None, "webhook": None, "timeout_s": 5.0}
    url = f"https://hooks.example.com:8443/services/T1/B2/{SECRET}?token={SECRET}&x=1"
    cfg = compose(
        [f"notify.webhook='{url}'", "notify.command='python3 \"my notify.py\" --to ops'", "notify.timeout_s=2"]
    )
    assert cfg.notify.webhook == url and cfg.notify.endpoint() == "https://hooks.example.com:8443"
    assert cfg.notify.argv() == ["python3", "my notify.py", "--to", "ops"]
    assert compose(["notify.webhook='http://[::1]:8080/x'"]).notify.endpoint() == "http://[::1]:8080"


def test_a_notify_program_that_does_not_exist_is_refused_for_a_new_run_only(tmp_path: Path) -> None:
    from orchestrator.config.notify_targets import check_notify_program

    cfg = compose([f"notify.command='no-such-program-zz --token {SECRET}'"])
    with pytest.raises(ConfigError) as info:
        check_notify_program(cfg.notify)
    assert info.value.key == "notify.command" and "no-such-program-zz" in str(info.value)
    assert SECRET not in str(info.value)
    script = tmp_path / "notify.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o700)
    check_notify_program(compose([f"notify.command='{script} --to ops'"]).notify)
    check_notify_program(compose(["notify.command='python3 -c pass'"]).notify)
    # A resume reads the saved config without asking: the program may have moved since.
    d = saved()
    d["notify"] = {"command": "no-such-program-zz", "webhook": None, "timeout_s": 5.0}
    assert config_from_plain(d).notify.command == "no-such-program-zz"


def test_a_saved_config_from_before_notifications_reads_back_without_them() -> None:
    d = saved()
    del d["notify"]
    assert config_from_plain(d).notify.webhook is None


def test_a_webhook_named_by_an_environment_variable_is_read_at_the_runs_start(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.config.notify_targets import notify_from_env

    url = f"https://hooks.example.com/services/{SECRET}?token={SECRET}"
    cfg = compose(["notify.webhook=env:ORCH_TEST_HOOK_URL"])
    assert cfg.notify.webhook == "env:ORCH_TEST_HOOK_URL"
    monkeypatch.setenv("ORCH_TEST_HOOK_URL", url)
    read = notify_from_env(cfg.notify)
    assert read.webhook == url and read.endpoint() == "https://hooks.example.com"
    assert cfg.notify.webhook == "env:ORCH_TEST_HOOK_URL"  # the config it was given is left as it was
    assert notify_from_env(read) == read  # nothing more to read
    monkeypatch.delenv("ORCH_TEST_HOOK_URL")
    with pytest.raises(ConfigError) as info:
        notify_from_env(cfg.notify)
    assert str(info.value) == (
        "notify.webhook: env:ORCH_TEST_HOOK_URL: the environment variable ORCH_TEST_HOOK_URL is not set; "
        "export it with the webhook's URL"
    )


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (f"ftp://hooks.example.com/{SECRET}", "scheme 'ftp'"),
        ("", "empty"),
        (f"hooks.example.com/services/{SECRET}", "no absolute URL"),
        (f"https://bot:{SECRET}@hooks.example.com/x", "user name or password"),
        (f"https://hooks.example.com/a {SECRET}", "space"),
        ("env:ORCH_TEST_OTHER", "no absolute URL"),
        ("notify.secret:https://hooks.example.com", "scheme 'notify.secret'"),
    ],
)
def test_an_environment_variable_that_holds_no_webhook_url_is_refused_naming_it_not_its_value(
    monkeypatch: pytest.MonkeyPatch, value: str, words: str
) -> None:
    from orchestrator.config.notify_targets import notify_from_env

    monkeypatch.setenv("ORCH_TEST_HOOK_URL", value)
    with pytest.raises(ConfigError) as info:
        notify_from_env(compose(["notify.webhook=env:ORCH_TEST_HOOK_URL"]).notify)
    text = str(info.value)
    assert info.value.key == "notify.webhook" and "\n" not in text
    assert text.startswith("notify.webhook: env:ORCH_TEST_HOOK_URL: ORCH_TEST_HOOK_URL holds no usable")
    assert words in text and SECRET not in text


@pytest.mark.parametrize("name", ["", "1HOOK", "HOOK-URL", "HOOK URL", "HOOK$", f"https://hooks.example.com/{SECRET}"])
def test_env_with_no_variable_name_is_refused_without_showing_it(name: str) -> None:
    err = refused([f"notify.webhook='env:{name}'"])
    assert err.key == "notify.webhook" and "names no environment variable" in str(err)
    assert SECRET not in str(err)


def test_a_config_json_names_kept_targets_which_read_back_and_a_command_line_may_not_give() -> None:
    d = saved()
    d["notify"] = {
        "command": "notify.secret:/opt/ops/page.py",
        "webhook": "notify.secret:https://hooks.example.com:8443",
        "timeout_s": 5.0,
    }
    cfg = config_from_plain(d)
    assert cfg.notify.kept() and cfg.notify.endpoint() == "https://hooks.example.com:8443"
    assert to_plain(cfg.notify) == d["notify"]
    # A name with more than scheme and host, or none, is damage; it is never shown (a token may be in it).
    for webhook in (
        f"notify.secret:https://hooks.example.com/services/{SECRET}",
        f"notify.secret:https://hooks.example.com?t={SECRET}",
        "notify.secret:",
        f"notify.secret:ftp://{SECRET}.example.com",
    ):
        d["notify"]["webhook"] = webhook
        with pytest.raises(ConfigError) as info:
            config_from_plain(d)
        assert info.value.key == "notify.webhook" and SECRET not in str(info.value)
    d["notify"]["webhook"] = None
    d["notify"]["command"] = "notify.secret: "
    with pytest.raises(ConfigError, match="names no program"):
        config_from_plain(d)
    # On a command line (or in a user's config) such a name is refused: there is no notify.secret to read.
    for override, key in (
        ("notify.webhook='notify.secret:https://hooks.example.com'", "notify.webhook"),
        ("notify.command='notify.secret:notify.sh'", "notify.command"),
    ):
        err = refused([override])
        assert err.key == key and "how a run's config.json names a target kept in" in str(err)


# --- a standby pool ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["recovery.standby_pool=team"], "needs cloud.control_store"),
        (["recovery.standby_pool=../x", "cloud.control_store=file:///tmp/c"], "expected a name"),
        (["recovery.standby_pool=team", "recovery.standby=true", "cloud.control_store=file:///tmp/c"], "pick one"),
    ],
)
def test_a_standby_pool_needs_a_control_store_a_plain_name_and_no_standby_of_its_own(
    overrides: list[str], words: str
) -> None:
    err = refused(overrides)
    assert err.key == "recovery.standby_pool" and words in str(err)


def test_a_standby_pool_with_a_control_store_passes() -> None:
    cfg = compose(["recovery.standby_pool=team-1", "cloud.control_store=file:///tmp/c"])
    assert cfg.recovery.standby_pool == "team-1"


# --- hedged provisioning -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["recovery.hedge_max_launches=-1"], "recovery.hedge_max_launches", "expected 0 (no hedging)"),
        (["recovery.hedge_after_s=12"], "recovery.hedge_after_s", "not under recovery.heartbeat_timeout_s"),
        (["recovery.hedge_max_launches=2", "recovery.standby=true"], "recovery.hedge_max_launches", "pick one"),
    ],
)
def test_a_hedge_is_bounded_sooner_than_the_lease_and_not_beside_a_standby(
    overrides: list[str], key: str, words: str
) -> None:
    err = refused(overrides)
    assert err.key == key and words in str(err)


def test_a_hedge_within_bounds_passes() -> None:
    cfg = compose(["recovery.hedge_max_launches=2", "recovery.hedge_after_s=3"])
    assert (cfg.recovery.hedge_max_launches, cfg.recovery.hedge_after_s) == (2, 3.0)
