"""compose_cache: a reused merge composes exactly what Hydra composes, and is reused only
while the files, the ConfigStore and the resolvers it read are as they were."""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config import compose_cache
from orchestrator.config.compose import CONF_DIR, _register


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    _register()
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path / "home"))
    compose_cache.clear()
    yield
    compose_cache.clear()


def shape(node: Any) -> Any:
    """Everything of a composed node that resolving or typing it later reads: its class,
    metadata and flags, and its content (interpolations as written); not the resolver cache."""
    from omegaconf import DictConfig, ListConfig

    meta = {f.name: getattr(node._metadata, f.name) for f in fields(node._metadata) if f.name != "resolver_cache"}
    if isinstance(node, DictConfig):
        content = node.__dict__["_content"]
        body = {k: shape(v) for k, v in content.items()} if isinstance(content, dict) else content
    elif isinstance(node, ListConfig):
        content = node.__dict__["_content"]
        body = [shape(v) for v in content] if isinstance(content, list) else content
    else:
        body = node._value()
    return (type(node).__name__, meta, body)


def composed(overrides: list[str], cached: bool, conf_dir: Path = CONF_DIR) -> Any:
    """The shape of the config (and its root's resolver-cache keys), or the exception chain."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            if cached:
                cfg = compose_cache.compose("config", overrides)
            else:
                cfg = hydra_compose(config_name="config", overrides=overrides)
        cache = OmegaConf.get_cache(cfg)
        return shape(cfg), {name: sorted(calls) for name, calls in cache.items()}
    except Exception as exc:
        chain = []
        e: BaseException | None = exc
        while e is not None and len(chain) < 10:
            chain.append((type(e).__name__, str(e)))
            e = e.__cause__ or e.__context__
        return chain
    finally:
        GlobalHydra.instance().clear()


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    conf = tmp_path / "user-conf"
    write(conf / "job" / "mine.yaml", "name: mine\nworkload: digits\nsteps: 11\nparams: {hidden: 4}\n")
    write(conf / "chaos" / "mine.yaml", "faults:\n  - {kind: kill_region, at_step: 3}\n")
    for option, steps in (("a", 21), ("b", 22)):
        write(conf / "flavor" / f"{option}.yaml", f"# @package job\nsteps: {steps}\n")
    return conf


CASES = [
    [],
    [
        *("job=gpt", "cloud=multi", "job.steps=7", "++job.params.hidden=3", "home='/x'", "action=status"),
        *("~notify.command", "+cloud.regions.extra.store=file:///s"),
    ],
    ["chaos=region_outage", "recovery=warm_standby", "data=ray_data", "chaos.faults=[{kind:kill_region,at_step:5}]"],
    # Refused: a group option, a key, a sweep, a group force-added, a parse error.
    ["job=nope", "job.steps=1"],
    ["job=gpt", "+job.extra=1", "job.stepz=1"],
    ["job.steps=1,2"],
    ["++job=gpt"],
    ["job.steps=[1"],
]


@pytest.mark.parametrize("overrides", CASES, ids=[" ".join(c) or "defaults" for c in CASES])
def test_a_reused_merge_composes_what_hydra_composes(overrides: list[str]) -> None:
    expected = composed(overrides, cached=False)
    first = composed(overrides, cached=True)
    reused_before = compose_cache.stats["reused"]
    again = composed(overrides, cached=True)
    assert first == expected
    assert again == expected
    if isinstance(expected, tuple):
        assert compose_cache.stats["reused"] == reused_before + 1, "the second composition merged again"


def test_a_users_config_dir_composes_what_hydra_composes_and_its_merge_is_reused(
    user_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compose_cache, "RACY_NS", 0)  # the files were written just now
    overrides = [f"hydra.searchpath=['file://{user_dir}']", "job=mine", "chaos=mine", "job.params.hidden=9"]
    expected = composed(overrides, cached=False)
    assert isinstance(expected, tuple)
    assert composed(overrides, cached=True) == expected
    reused = compose_cache.stats["reused"]
    assert composed(overrides, cached=True) == expected
    assert compose_cache.stats["reused"] == reused + 1


def test_an_edited_added_or_removed_file_is_merged_again(user_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compose_cache, "RACY_NS", 0)
    overrides = [f"hydra.searchpath=['file://{user_dir}']", "job=mine"]
    before = composed(overrides, cached=True)
    mine = user_dir / "job" / "mine.yaml"
    stat = mine.stat()
    # The same size, and times set apart, as a file system with a fine clock would.
    mine.write_text(mine.read_text().replace("steps: 11", "steps: 12"))
    os.utime(mine, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    edited = composed(overrides, cached=True)
    assert edited == composed(overrides, cached=False)
    assert edited != before
    merged = compose_cache.stats["merged"]
    write(user_dir / "job" / "other.yaml", "name: other\n")
    assert composed(overrides, cached=True) == edited
    assert compose_cache.stats["merged"] == merged + 1
    reused = compose_cache.stats["reused"]
    mine.unlink()
    assert composed(overrides, cached=True) == composed(overrides, cached=False)
    assert compose_cache.stats["reused"] == reused
    assert "Could not find 'job/mine'" in str(composed(overrides, cached=True))


def test_a_file_changed_just_before_its_merge_keeps_nothing(user_dir: Path) -> None:
    overrides = [f"hydra.searchpath=['file://{user_dir}']", "job=mine"]
    composed(overrides, cached=True)
    composed(overrides, cached=True)
    assert (compose_cache.stats["reused"], compose_cache.stats["merged"]) == (0, 2)


def test_a_resolver_in_a_defaults_list_is_resolved_per_call(user_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compose_cache, "RACY_NS", 0)
    write(user_dir / "job" / "picky.yaml", "defaults:\n  - /flavor: ${oc.env:PICK}\n  - _self_\nname: picky\n")
    overrides = [f"hydra.searchpath=['file://{user_dir}']", "job=picky"]
    monkeypatch.setenv("PICK", "a")
    one = composed(overrides, cached=True)
    assert one == composed(overrides, cached=False)
    monkeypatch.setenv("PICK", "b")
    other = composed(overrides, cached=True)
    assert other == composed(overrides, cached=False)
    assert other != one
    assert compose_cache.stats["reused"] == 0


def test_a_merge_that_warns_warns_each_time_and_is_not_kept(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    write(conf / "config.yaml", "defaults:\n  - job: a\nx: 1\n")  # no _self_: Hydra warns
    write(conf / "job" / "a.yaml", "y: 2\n")
    for _ in range(2):
        with pytest.warns(UserWarning, match="missing `_self_`"):
            result = composed([], cached=True, conf_dir=conf)
        assert isinstance(result, tuple)
    assert compose_cache.stats["reused"] == 0


def test_now_in_the_config_reads_this_calls_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from omegaconf import OmegaConf
    from omegaconf.basecontainer import BaseContainer

    conf = tmp_path / "conf"
    write(conf / "config.yaml", "stamp: ${now:%H-%M-%S}\n")
    monkeypatch.setattr(compose_cache, "RACY_NS", 0)
    ticks = iter(range(100))
    monkeypatch.setattr(BaseContainer, "_resolvers", dict(BaseContainer._resolvers))

    def stamp() -> str:
        from hydra import initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
            # After Hydra's start-up, which registers its own.
            OmegaConf.register_new_resolver("now", lambda pattern: f"t{next(ticks)}", use_cache=True, replace=True)
            cfg = compose_cache.compose("config", [])
        GlobalHydra.instance().clear()
        return str(OmegaConf.to_container(cfg, resolve=True)["stamp"])

    first, second = stamp(), stamp()
    assert compose_cache.stats["reused"] == 1
    # A composition evaluates Hydra's run and sweep folders' times (two patterns, cached on
    # the root): the config's ${now:%H-%M-%S} reads its own composition's value.
    assert (first, second) == ("t1", "t3")


def test_the_config_store_holding_other_nodes_merges_again(tmp_path: Path) -> None:
    from hydra.core.config_store import ConfigStore

    composed(["job=gpt"], cached=True)
    ConfigStore.instance().store(name="cc_test_only", node={"a": 1}, group="zz_compose_cache_test")
    try:
        composed(["job=gpt"], cached=True)
        assert compose_cache.stats == {"reused": 0, "merged": 2, "primary_loaded": 2}
    finally:
        del ConfigStore.instance().repo["zz_compose_cache_test"]


def test_the_pinned_hydra_is_one_compose_cache_follows() -> None:
    # compose_cache follows Hydra's loader step by step: a new Hydra needs its steps read
    # again (and SUPPORTED_HYDRA extended), or every command composes at Hydra's own pace.
    assert compose_cache.supported()


def test_the_primary_config_is_read_once_while_unchanged_and_again_once_edited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    monkeypatch.setattr(compose_cache, "RACY_NS", 0)
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    overrides = ["job.steps=7"]
    first = composed(overrides, cached=True, conf_dir=conf)
    assert composed(overrides, cached=True, conf_dir=conf) == first
    assert composed(["job.steps=8"], cached=True, conf_dir=conf) == composed(["job.steps=8"], False, conf)
    assert compose_cache.stats["primary_loaded"] == 1
    primary = conf / "config.yaml"
    stat = primary.stat()
    primary.write_text(primary.read_text().replace("job: digits", "job: gpt"))
    os.utime(primary, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    edited = composed(overrides, cached=True, conf_dir=conf)
    assert edited == composed(overrides, cached=False, conf_dir=conf)
    assert edited != first
    assert compose_cache.stats["primary_loaded"] == 2


def test_a_reused_parse_tree_still_resolves_per_call_and_a_bad_one_fails_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from omegaconf import OmegaConf, base, grammar_parser
    from omegaconf.errors import GrammarParseError

    with compose_cache.parse_trees_reused():
        monkeypatch.setenv("CC_TEST_VALUE", "1")
        assert OmegaConf.to_container(OmegaConf.create({"a": "${oc.env:CC_TEST_VALUE}"}), resolve=True) == {"a": "1"}
        monkeypatch.setenv("CC_TEST_VALUE", "2")
        assert OmegaConf.to_container(OmegaConf.create({"a": "${oc.env:CC_TEST_VALUE}"}), resolve=True) == {"a": "2"}
        assert ("${oc.env:CC_TEST_VALUE}", "configValue", "DEFAULT_MODE") in compose_cache._parsed
        for _ in range(2):
            with pytest.raises(GrammarParseError):
                OmegaConf.create({"a": "${oc.env:"})
    assert base.parse is grammar_parser.parse


def merging_after(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], None]) -> None:
    """Every merge runs ``meanwhile`` first, inside its warning record."""
    merge = compose_cache._merge

    def merged(*args: Any) -> Any:
        meanwhile()
        return merge(*args)

    monkeypatch.setattr(compose_cache, "_merge", merged)


def twice_recording(warned: list[Any] | None = None) -> tuple[Any, Any]:
    """The defaults composed twice (cached), every warning recorded (into ``warned``)."""
    with warnings.catch_warnings(record=True) as given:
        warnings.simplefilter("always")
        first, again = composed([], cached=True), composed([], cached=True)
        gc.collect()
    if warned is not None:
        warned.extend(given)
    return first, again


def test_a_finalizers_resource_warning_during_the_merge_costs_no_reuse_and_is_still_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The garbage collector may free another library's socket in the middle of a merge,
    and its finalizer warns there: not the config's warning, so the merge is still kept,
    and the warning still reaches its reader."""
    merging_after(monkeypatch, lambda: warnings.warn("unclosed <socket.socket fd=9>", ResourceWarning, stacklevel=1))
    given: list[Any] = []
    first, again = twice_recording(given)
    assert first == again == composed([], cached=False)
    assert compose_cache.stats["reused"] == 1 and compose_cache.stats["merged"] == 1
    assert [str(g.message) for g in given if g.category is ResourceWarning] == ["unclosed <socket.socket fd=9>"]


def test_a_configs_own_warning_still_costs_its_reuse(monkeypatch: pytest.MonkeyPatch) -> None:
    merging_after(monkeypatch, lambda: warnings.warn("a deprecated key", UserWarning, stacklevel=1))
    twice_recording()
    assert compose_cache.stats["reused"] == 0


def test_garbage_collected_during_the_merge_warns_after_it_and_costs_no_reuse(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cycle whose finalizer warns (any category) is collected after the merge's record,
    not inside it: the merge is kept all the same."""

    class Cycle:
        def __del__(self) -> None:
            warnings.warn("coroutine 'fetch' was never awaited", RuntimeWarning, stacklevel=1)

    def cycle_freed() -> None:
        cycle = Cycle()
        cycle.me = cycle  # type: ignore[attr-defined]
        del cycle
        if gc.isenabled():
            gc.collect(0)  # where the collector, were it on, could run

    merging_after(monkeypatch, cycle_freed)
    twice_recording()
    assert compose_cache.stats["reused"] == 1
