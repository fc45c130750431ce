"""saved: a run's config.json, written and read back to the same config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.saved import config_from_plain, refuse_credentials, saved_json
from orchestrator.config.schema import NotifyConfig
from orchestrator.errors import ConfigError
from orchestrator.wire.codec import decode_object, to_plain

pytestmark = pytest.mark.unit


def test_a_saved_config_reads_back_the_same(tmp_path: Path) -> None:
    cfg = compose([f"home={tmp_path}", "job=digits"])
    data = saved_json(cfg, NotifyConfig())
    back = config_from_plain(decode_object(data))
    assert to_plain(back) == to_plain(cfg)
    assert json.loads(data)["notify"] == to_plain(NotifyConfig())


def test_a_damaged_saved_config_names_the_key(tmp_path: Path) -> None:
    plain = decode_object(saved_json(compose([f"home={tmp_path}"]), NotifyConfig()))
    with pytest.raises(ConfigError, match=r"^job: is missing"):
        config_from_plain({k: v for k, v in plain.items() if k != "job"})
    # A section added since (notify, metrics) reads with its defaults.
    assert config_from_plain({k: v for k, v in plain.items() if k != "metrics"}).metrics.tensorboard
    with pytest.raises(ConfigError, match=r"^config:"):
        config_from_plain([plain])


def test_credentials_never_reach_the_disk(tmp_path: Path) -> None:
    cfg = compose([f"home={tmp_path}"])
    refuse_credentials(cfg, "config.json")
    cfg.cloud.control_options = {"secret_access_key": "x"}
    with pytest.raises(ValueError, match=r"config.json"):
        refuse_credentials(cfg, "config.json")
