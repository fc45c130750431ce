"""``orchestrator.api.config``: a config composed from the command line's words, and the
words that make it again after fields were changed on it (or the one line why not)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest

from orchestrator.api.config import REMOVED, command_line, compose, composed_again, quote, value_word
from orchestrator.config.compose import CONF_DIR
from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.wire.codec import to_plain

pytestmark = pytest.mark.unit


def test_words_one_by_one_or_as_a_list_compose_the_same_config(tmp_path: Path) -> None:
    one = compose("job=digits", "job.steps=20", home=tmp_path / "h")
    listed = compose(["job=digits", "job.steps=20"], home=str(tmp_path / "h"))
    assert one == listed and one.job.steps == 20
    assert one.home == str(tmp_path / "h") and one.home_path == str(tmp_path / "h")


def test_a_bad_key_or_an_option_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as bad:
        compose("job=digits", "job.stepz=1", home=tmp_path)
    assert bad.value.key.startswith("job.stepz") and "\n" not in str(bad.value)
    with pytest.raises(ConfigError, match=r"^-m: is an option of the command line") as opt:
        compose("-m", "job=digits")
    assert isinstance(opt.value, OrchestratorError)
    with pytest.raises(ConfigError, match="each override is a string"):
        compose(["job=digits", 3])  # type: ignore[list-item]


def test_fields_changed_after_compose_become_words_that_compose_the_same_config(tmp_path: Path) -> None:
    cfg = compose("job=digits", home=tmp_path)
    assert command_line(cfg) == ["job=digits", f"home={quote(str(tmp_path))}"]
    cfg.job.steps = 30
    cfg.trainer.workers = 1
    cfg.progress = False
    cfg.job.params["note"] = "it's here"  # a free-form mapping takes a new key
    words, again = composed_again(cfg)
    assert words[2:] == ["job.params.note='it\\'s here'", "job.steps=30", "trainer.workers=1", "progress=false"]
    assert to_plain(again) == to_plain(cfg) and again is not cfg


def test_a_change_no_word_can_say_is_refused_naming_its_key(tmp_path: Path) -> None:
    cfg = compose("job=digits", home=tmp_path)
    cfg.chaos.faults = [copy.deepcopy(cfg.chaos)]  # type: ignore[list-item]
    with pytest.raises(ConfigError, match=r"^chaos\.faults: was changed after compose"):
        command_line(cfg)
    cfg = compose("job=digits", home=tmp_path)
    del cfg.cloud.regions[next(iter(cfg.cloud.regions))]
    with pytest.raises(ConfigError, match="was removed after compose"):
        command_line(cfg)


def test_a_config_not_made_by_compose_is_refused(tmp_path: Path) -> None:
    cfg = compose("job=digits", home=tmp_path)
    with pytest.raises(ConfigError, match=r"^config: was not made by orchestrator.compose"):
        command_line(copy.deepcopy(cfg))


def test_values_as_the_command_line_writes_them() -> None:
    assert [value_word("k", v) for v in (None, True, False, 3, 0.5, "a b")] == [
        "null",
        "true",
        "false",
        "3",
        "0.5",
        "'a b'",
    ]
    for bad in (REMOVED, [1], {"a": 1}, "a\\b"):
        with pytest.raises(ConfigError):
            value_word("k", bad)


def test_a_folder_of_the_users_configs_is_searched_and_kept_in_the_words(tmp_path: Path) -> None:
    (tmp_path / "conf" / "job").mkdir(parents=True)
    shutil.copy(CONF_DIR / "job" / "digits.yaml", tmp_path / "conf" / "job" / "mine.yaml")
    cfg = compose("job=mine", "job.steps=7", home=tmp_path / "h", config_dirs=[tmp_path / "conf"])
    assert cfg.job.steps == 7
    assert f"--config-dir={tmp_path / 'conf'}" in command_line(cfg)
