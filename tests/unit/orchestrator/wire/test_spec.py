"""The runtime spec's file (orchestrator/wire/spec.py): written, read back the same, and a
damaged one refused in one line naming the key. Its sections are test_sections.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config.compose import compose
from orchestrator.wire.spec import RuntimeSpec
from tests.unit.orchestrator.wire.test_sections import spec_of

pytestmark = pytest.mark.unit


def test_a_dumped_spec_loads_back_equal(tmp_path: Path) -> None:
    spec = spec_of(compose(["job=digits"]), lineage=[[1, 0], [2, 40]])
    path = tmp_path / "spec.json"
    spec.dump(str(path))
    back = RuntimeSpec.load(str(path))
    assert back == RuntimeSpec.from_plain(spec.to_plain())
    assert back.to_plain() == json.loads(path.read_text())
    assert back.fencing_lineage() is not None and back.fencing_lineage().generation == 2


def test_a_file_that_is_not_json_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match=r"^runtime spec: not JSON"):
        RuntimeSpec.load(str(path))


def test_an_unknown_or_missing_key_is_refused_by_name() -> None:
    plain = spec_of(compose(["job=digits"])).to_plain()
    with pytest.raises(ValueError, match="newer_key"):
        RuntimeSpec.from_plain({**plain, "newer_key": 1})
    del plain["region"]
    with pytest.raises(ValueError, match="region"):
        RuntimeSpec.from_plain(plain)


def test_a_lineage_past_the_attempts_generation_is_refused() -> None:
    with pytest.raises(ValueError, match="lineage"):
        spec_of(compose(["job=digits"]), lineage=[[1, 0], [2, 40], [3, 80]])
