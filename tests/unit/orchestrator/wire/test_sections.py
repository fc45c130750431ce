"""The runtime spec's typed sections: the file the controller writes is the file the
runtime reads, key for key; a malformed one is refused in one line naming the key; and
the sections stay in step with the config dataclasses they mirror."""

from __future__ import annotations

import json
import math
import re
from dataclasses import MISSING, asdict, fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import schema as cfgmod
from orchestrator.config.compose import compose
from orchestrator.config.schema import Config
from orchestrator.control.attempt import runtime_data, runtime_hpo
from orchestrator.wire import sections
from orchestrator.wire.codec import to_plain
from orchestrator.wire.faults import FaultKind
from orchestrator.wire.sections import (
    CheckpointSection,
    DataSection,
    FallbackStore,
    FaultSpec,
    FsdpSection,
    HpoSection,
    JobSection,
    RandomTrigger,
    TrainerSection,
)
from orchestrator.wire.spec import RuntimeSpec

pytestmark = pytest.mark.unit


def spec_of(cfg: Config, search: Config | None = None, **fields_: Any) -> RuntimeSpec:
    """A spec as AttemptRunner.start_runtime builds it: the config's sections as plain dicts."""
    return RuntimeSpec(
        run_id="run-1",
        generation=2,
        region="local-a",
        store_url="file:///tmp/store",
        control_url="file:///tmp/control",
        ray_address="127.0.0.1:6379",
        ray_storage_path="/tmp/ray",
        job=to_plain(cfg.job),
        trainer=to_plain(cfg.trainer),
        checkpoint=to_plain(cfg.checkpoint),
        faults=[to_plain(f) for f in cfg.chaos.faults],
        data=runtime_data(cfg),
        hpo=None if search is None else runtime_hpo(search),
        **fields_,
    )


@pytest.fixture(scope="module")
def full() -> RuntimeSpec:
    cfg = compose(["job=gpt", "chaos=soak"])
    return spec_of(
        cfg,
        compose(["job=digits_hpo"]),
        fallback_stores=[{"region": "local-b", "url": "file:///tmp/b", "options": {"auto_mkdir": True}}],
        lineage=[[1, 0], [2, 40]],
        scratch_dir="/tmp/scratch",
    )


def test_a_spec_round_trips_through_its_file(tmp_path: Path, full: RuntimeSpec) -> None:
    assert full.faults and any(f.random is not None for f in full.faults) and full.hpo is not None
    full.dump(str(tmp_path / "spec.json"))
    assert RuntimeSpec.load(str(tmp_path / "spec.json")) == full
    # What a Ray Train worker gets: plain JSON (no enum, no dataclass), the same spec back.
    plain = full.to_plain()
    assert json.loads(json.dumps(plain)) == plain
    assert RuntimeSpec.from_plain(plain) == full


def test_the_file_keeps_the_configs_keys(tmp_path: Path, full: RuntimeSpec) -> None:
    cfg = compose(["job=gpt", "chaos=soak"])
    full.dump(str(tmp_path / "spec.json"))
    raw = json.loads((tmp_path / "spec.json").read_text())
    assert raw["job"] == to_plain(cfg.job)
    assert raw["trainer"] == to_plain(cfg.trainer)
    assert raw["checkpoint"] == to_plain(cfg.checkpoint)
    assert raw["data"] == runtime_data(cfg)
    assert raw["faults"] == [to_plain(f) for f in cfg.chaos.faults]
    assert raw["hpo"] == runtime_hpo(compose(["job=digits_hpo"]))


def test_sections_are_typed_whether_given_plain_or_typed(full: RuntimeSpec) -> None:
    assert isinstance(full.job, JobSection) and isinstance(full.trainer, TrainerSection)
    assert isinstance(full.checkpoint, CheckpointSection) and isinstance(full.data, DataSection)
    assert isinstance(full.hpo, HpoSection) and isinstance(full.fallback_stores[0], FallbackStore)
    assert all(isinstance(f, FaultSpec) and isinstance(f.kind, FaultKind) for f in full.faults)
    typed = RuntimeSpec(**{f.name: getattr(full, f.name) for f in fields(full)})
    assert typed == full
    # Numbers a JSON writer gives as integers are read as the floats the field declares.
    assert TrainerSection.from_plain({"cpus_per_worker": 2}).cpus_per_worker == 2.0


BAD = [
    # (the key, a change to the spec's JSON): wrong types
    ("job.steps", lambda d: d["job"].update(steps="300")),
    ("job.steps", lambda d: d["job"].update(steps=True)),
    ("job.seed", lambda d: d["job"].update(seed=1.5)),
    ("job.lr", lambda d: d["job"].update(lr=math.inf)),
    ("job.params", lambda d: d["job"].update(params=["a"])),
    ("trainer.workers", lambda d: d["trainer"].update(workers=False)),
    ("trainer.cpus_per_worker", lambda d: d["trainer"].update(cpus_per_worker="1")),
    ("checkpoint.async_upload", lambda d: d["checkpoint"].update(async_upload="yes")),
    ("data.samples", lambda d: d["data"].update(samples=None)),
    ("hpo.search_space.lr", lambda d: d["hpo"]["search_space"].update(lr=0.1)),
    ("hpo.resume_errored", lambda d: d["hpo"].update(resume_errored=1)),
    ("faults[1].at_step", lambda d: d["faults"][1].update(at_step="5")),
    ("faults[0]", lambda d: d["faults"].__setitem__(0, "kill_region")),
    ("fallback_stores[0].url", lambda d: d["fallback_stores"][0].update(url=None)),
    ("generation", lambda d: d.update(generation="2")),
    ("job", lambda d: d.update(job=None)),
    # closed sets and ranges
    ("trainer.autocast", lambda d: d["trainer"].update(autocast="fp8")),
    ("data.loader", lambda d: d["data"].update(loader="mmap")),
    ("hpo.mode", lambda d: d["hpo"].update(mode="best")),
    ("hpo.metric", lambda d: d["hpo"].update(metric="a loss")),
    ("hpo.scheduler", lambda d: d["hpo"].update(scheduler="hyperband")),
    ("faults[0].kind", lambda d: d["faults"][0].update(kind="explode")),
    ("faults[0].during", lambda d: d["faults"][0].update(during="lunch")),
    ("checkpoint.keep_last", lambda d: d["checkpoint"].update(keep_last=0)),
    ("trainer.gpus_per_worker", lambda d: d["trainer"].update(gpus_per_worker=-1)),
    ("job.eval_fraction", lambda d: d["job"].update(eval_fraction=1.5)),
    ("faults[1].random.rate", lambda d: d["faults"][1].update(random={"seed": 1, "rate": 2})),
    ("job.seed", lambda d: d["job"].update(seed=2**63)),
    # missing required keys
    ("job.name", lambda d: d["job"].pop("name")),
    ("faults[0].kind", lambda d: d["faults"][0].pop("kind")),
    ("faults[1].random.rate", lambda d: d["faults"][1].update(random={"seed": 1})),
    ("fallback_stores[0].region", lambda d: d["fallback_stores"][0].pop("region")),
    ("run_id", lambda d: d.pop("run_id")),
    # a newer controller's key: refused by name
    ("job.priority", lambda d: d["job"].update(priority=1)),
    ("hpo.population", lambda d: d["hpo"].update(population=4)),
    ("faults[0].jitter_s", lambda d: d["faults"][0].update(jitter_s=1)),
    ("cost_limit", lambda d: d.update(cost_limit=10)),
]


@pytest.mark.parametrize(("key", "change"), BAD, ids=[f"{i}-{k}" for i, (k, _) in enumerate(BAD)])
def test_a_malformed_spec_is_refused_in_one_line_naming_the_key(
    tmp_path: Path, full: RuntimeSpec, key: str, change: Any
) -> None:
    plain = full.to_plain()
    change(plain)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(plain))
    with pytest.raises(ValueError) as err:
        RuntimeSpec.load(str(path))
    message = str(err.value)
    assert message.startswith(f"runtime spec: {key}: "), message
    assert "\n" not in message


def test_a_file_that_is_not_a_spec_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    for text, says in (("{", "runtime spec: not JSON"), ("[]", "runtime spec: the file: got []; expected a mapping")):
        path.write_text(text)
        with pytest.raises(ValueError, match="^" + re.escape(says)):
            RuntimeSpec.load(str(path))


def _defaults(cls: type) -> dict[str, Any]:
    out = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            made = f.default_factory()
            # A nested section (trainer.fsdp) mirrors its config dataclass field for field.
            out[f.name] = asdict(made) if is_dataclass(made) else made
        else:
            out[f.name] = "<required>"
    return out


def _config_defaults(cls: type) -> dict[str, Any]:
    # omegaconf's MISSING ("???") marks a required key.
    return {k: "<required>" if v == "???" else v for k, v in _defaults(cls).items()}


@pytest.mark.parametrize(
    ("config_cls", "section", "extra"),
    [
        (cfgmod.JobConfig, JobSection, {}),
        (cfgmod.TrainerConfig, TrainerSection, {}),
        (cfgmod.FsdpConfig, FsdpSection, {}),
        (cfgmod.CheckpointConfig, CheckpointSection, {}),
        (cfgmod.DataConfig, DataSection, {}),
        (
            cfgmod.HpoConfig,
            HpoSection,
            {k: v for k, v in _defaults(cfgmod.RecoveryConfig).items() if k in ("resume_errored", "restart_errored")},
        ),
        (cfgmod.FaultConfig, FaultSpec, {}),
        (cfgmod.RandomTrigger, RandomTrigger, {}),
    ],
)
def test_each_section_mirrors_its_config_dataclass(config_cls: type, section: type, extra: dict[str, Any]) -> None:
    assert _defaults(section) == {**_config_defaults(config_cls), **extra}


def test_the_closed_sets_are_the_configs() -> None:
    # One vocabulary: the config types its fields with the wire's enums.
    assert (cfgmod.Loader, cfgmod.Autocast, cfgmod.Mode, cfgmod.Scheduler) == (
        sections.Loader,
        sections.Autocast,
        sections.Mode,
        sections.Scheduler,
    )
    # A region's preemption_notice: the wire's sources, and auto, which the controller resolves.
    assert [m.value for m in cfgmod.PreemptionNotice] == ["auto", *sections.NOTICE_SOURCES]
