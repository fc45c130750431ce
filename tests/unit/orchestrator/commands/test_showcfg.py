"""--cfg (orchestrator/commands/showcfg.py): the config it prints composes the same config, with no token in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.__main__ import main
from orchestrator.commands.showcfg import SAVED_GROUP, unread_job_keys
from orchestrator.config.compose import compose
from orchestrator.errors import ConfigError
from orchestrator.wire.codec import to_plain

pytestmark = pytest.mark.unit


def test_cfg_job_prints_a_config_that_composes_the_same_config_and_keeps_tokens_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = ["notify.webhook=https://hooks.example.com/T0K3N", "notify.command='notify-send T0K3N'"]
    given = [
        "job=gpt",
        "cloud=local_cloudstores",
        "data=ray_data",
        "chaos.faults=[{kind:kill_region,at_step:5}]",
        "job.params.n_layer=3",
        "+cloud.regions.local-d.store=file:///tmp/d",
        "cloud.candidates=[local-d,local-a]",
        "notify.timeout_s=3",
        "job.name=x",
        *tokens,
    ]
    assert main(["--cfg", "job", *given]) == 0
    printed = capsys.readouterr().out
    assert "T0K3N" not in printed
    assert "webhook: notify.secret:https://hooks.example.com" in printed and "notify.secret:notify-send" in printed
    (tmp_path / SAVED_GROUP).mkdir()
    (tmp_path / SAVED_GROUP / "saved.yaml").write_text(printed)
    fed_back = [f"hydra.searchpath=['file://{tmp_path}']", f"+{SAVED_GROUP}=saved"]
    assert to_plain(compose([*fed_back, *tokens])) == to_plain(compose(given))
    # Fed back without them, the targets kept out are asked for by name.
    with pytest.raises(ConfigError) as info:
        compose(fed_back)
    assert info.value.key == "notify.webhook" and "give the URL, or env:VARNAME" in str(info.value)


def test_cfg_job_leaves_out_the_job_keys_the_workload_does_not_read(capsys: pytest.CaptureFixture[str]) -> None:
    assert unread_job_keys(compose(["job=digits"]).job) == ()
    assert unread_job_keys(compose(["job=gpt"]).job) == ("lr", "hidden_size", "eval_fraction")
    assert main(["--cfg", "job", "job=gpt"]) == 0
    printed = capsys.readouterr().out
    job = printed.split("\njob:\n", 1)[1].split("\ntrainer:", 1)[0]
    assert "\n  lr:" not in job and "hidden_size" not in job and "\n    lr: 0.003" in job
    assert "# Left out, the gpt workload does not read them: job.lr, job.hidden_size, job.eval_fraction" in printed
