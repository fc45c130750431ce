"""Preemption notices from the cloud's instance metadata and Ray's drain, without Ray: the
answers read strictly, the watch polled against a real HTTP server on 127.0.0.1 that
answers as AWS's IMDSv2 and GCP's metadata server document, the notice handed to the
control channel where the driver's SIGTERM relay puts one, and the region's key."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from orchestrator.config.compose import compose
from orchestrator.config.saved import config_from_plain
from orchestrator.config.schema import Config, PreemptionNotice, RegionConfig
from orchestrator.config.validate_cloud import validate_notice
from orchestrator.control.attempt import runtime_notice
from orchestrator.errors import ConfigError
from orchestrator.runtime import notices
from orchestrator.runtime.notices import Answer, Malformed, NodeWatch, Notice, parse_aws, parse_drain, parse_gcp
from orchestrator.wire.codec import to_plain
from orchestrator.wire.sections import NoticeSection, NoticeSource
from tests.support.servers import MetadataServer

pytestmark = pytest.mark.unit

FLAVOR = {"metadata-flavor": "Google"}


# --- the answers, read strictly ------------------------------------------------------------------
def test_aws_404_is_no_notice_and_200_is_the_action_and_its_time() -> None:
    assert parse_aws(Answer(404, {}, b"")) is None
    got = parse_aws(Answer(200, {}, b'{"action": "terminate", "time": "2017-09-18T08:22:00Z"}'))
    assert got == Notice("aws", "terminate", "2017-09-18T08:22:00+00:00")
    assert parse_aws(Answer(200, {}, b'{"action": "hibernate", "time": "2017-09-18T08:22:00Z"}')).action == "hibernate"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (Answer(500, {}, b""), "answered HTTP 500"),
        (Answer(200, {}, b"terminate"), "not JSON"),
        (Answer(200, {}, b'["terminate"]'), "not a JSON object"),
        (Answer(200, {}, b'{"action": "reboot", "time": "2017-09-18T08:22:00Z"}'), "action is not one of"),
        (Answer(200, {}, b'{"action": "stop"}'), "has no time"),
        (Answer(200, {}, b'{"action": "stop", "time": "in two minutes"}'), "time is not"),
        (Answer(200, {}, b'{"action": "stop", "time": "2017-09-18T08:22:00Z", "x": "\xff"}'), "not ASCII"),
        (Answer(200, {}, b"{" + b" " * notices.MAX_BODY + b"}"), "longer than"),
    ],
)
def test_a_malformed_aws_answer_is_refused_in_one_line_that_never_quotes_it(answer: Answer, reason: str) -> None:
    with pytest.raises(Malformed) as info:
        parse_aws(answer)
    assert reason in str(info.value) and "\n" not in str(info.value)
    assert "reboot" not in str(info.value) and "two minutes" not in str(info.value)


def test_gcp_false_is_no_notice_true_is_one_and_only_googles_server_is_believed() -> None:
    assert parse_gcp(Answer(200, FLAVOR, b"FALSE")) is None
    assert parse_gcp(Answer(200, FLAVOR, b"TRUE\n")) == Notice("gcp", "preempted")
    for answer, reason in [
        (Answer(200, {}, b"TRUE"), "Metadata-Flavor"),
        (Answer(200, FLAVOR, b"true"), "neither TRUE nor FALSE"),
        (Answer(404, FLAVOR, b""), "HTTP 404"),
    ]:
        with pytest.raises(Malformed, match=reason):
            parse_gcp(answer)


def test_rays_drain_of_this_node_is_a_notice_with_its_deadline() -> None:
    assert parse_drain({}, "n1") is None
    assert parse_drain({"n2": 5}, "n1") is None
    assert parse_drain({"n1": 0}, "n1") == Notice("ray", "drain", None)
    assert parse_drain({"n1": 1_700_000_000_000}, "n1") == Notice("ray", "drain", "2023-11-14T22:13:20+00:00")
    for drained in ([], {"n1": "soon"}, {"n1": True}, {"n1": -1}):
        with pytest.raises(Malformed):
            parse_drain(drained, "n1")


def test_a_drain_that_cannot_be_read_is_one_line_naming_the_failure() -> None:
    def broken() -> dict[str, int]:
        raise ConnectionError("GCS down")

    with pytest.raises(Malformed, match=r"cannot read the draining nodes \(ConnectionError\)"):
        notices.RayDrain("n1", broken).check()
    assert notices.RayDrain("n1", lambda: {"n1": 0}).check() == Notice("ray", "drain", None)


# --- against the services, as they answer ----------------------------------------------------------
@pytest.fixture
def aws() -> MetadataServer:
    with MetadataServer("aws") as server:
        yield server


@pytest.fixture
def gcp() -> MetadataServer:
    with MetadataServer("gcp") as server:
        yield server


def test_a_stopped_watch_ends() -> None:
    stop = threading.Event()
    thread = NodeWatch([], lambda n: None, lambda r: None, stop, poll_s=0.01).start()
    stop.set()
    thread.join(timeout=2)
    assert not thread.is_alive()


# --- the region's key, and what crosses to the runtime ---------------------------------------------
@pytest.mark.parametrize(
    ("infra", "given", "source"),
    [
        ("aws/us-east-1", PreemptionNotice.auto, NoticeSource.aws),
        ("gcp/us-central1", PreemptionNotice.auto, NoticeSource.gcp),
        ("slurm/orch-slurm-a", PreemptionNotice.auto, NoticeSource.none),
        ("", PreemptionNotice.auto, NoticeSource.none),
        ("aws/us-east-1", PreemptionNotice.none, NoticeSource.none),
        ("k8s/gke", PreemptionNotice.gcp, NoticeSource.gcp),
    ],
)
def test_auto_watches_the_regions_own_cloud(infra: str, given: PreemptionNotice, source: NoticeSource) -> None:
    assert RegionConfig(store="file:///s", infra=infra, preemption_notice=given).notice_source() is source


def test_the_runtime_gets_the_resolved_source_and_the_url() -> None:
    cfg = Config()
    cfg.cloud.regions = {"a": RegionConfig(store="file:///s", infra="gcp/x", preemption_notice_url="http://10.0.0.1")}
    assert runtime_notice(cfg, "a") == {"source": "gcp", "url": "http://10.0.0.1"}
    assert NoticeSection.from_plain(runtime_notice(cfg, "a")) == NoticeSection("gcp", "http://10.0.0.1")


@pytest.mark.parametrize(
    ("notice", "url", "why"),
    [
        (PreemptionNotice.auto, "http://127.0.0.1:9", "watches for no notice"),
        (PreemptionNotice.aws, "https://169.254.169.254", "plain http"),
        (PreemptionNotice.aws, "http://user:pw@169.254.169.254", "user name or password"),
        (PreemptionNotice.aws, "http://169.254.169.254/?x=1", "plain http"),
        (PreemptionNotice.aws, "http://:80", "plain http"),
        (PreemptionNotice.aws, "http://h:99999", "plain http"),
    ],
)
def test_a_url_that_cannot_serve_is_refused_naming_the_key(notice: PreemptionNotice, url: str, why: str) -> None:
    region = RegionConfig(store="file:///s", preemption_notice=notice, preemption_notice_url=url)
    with pytest.raises(ConfigError) as info:
        validate_notice("a", region)
    assert info.value.key == "cloud.regions.a.preemption_notice_url" and why in str(info.value)
    assert "pw" not in str(info.value)


def test_the_runtime_refuses_a_spec_whose_url_is_not_plain_http() -> None:
    with pytest.raises(ValueError, match=r"runtime spec: preemption_notice\.url: got 'https://x'"):
        NoticeSection.from_plain({"source": "aws", "url": "https://x"})
    with pytest.raises(ValueError, match=r"preemption_notice\.source: got 'azure'; allowed: none, aws, gcp"):
        NoticeSection.from_plain({"source": "azure"})


def test_a_config_json_from_before_the_keys_resumes_with_auto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCHESTRATOR_HOME", str(tmp_path))
    saved = json.loads(json.dumps(to_plain(compose(["run_id=r1"]))))
    for region in saved["cloud"]["regions"].values():
        del region["preemption_notice"], region["preemption_notice_url"]
    cfg = config_from_plain(saved)
    assert {r.notice_source() for r in cfg.cloud.regions.values()} == {NoticeSource.none}
    assert {r.preemption_notice for r in cfg.cloud.regions.values()} == {PreemptionNotice.auto}
