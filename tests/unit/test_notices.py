"""Preemption notices from the cloud's instance metadata and Ray's drain, without Ray: the
answers read strictly, the watch polled against a real HTTP server on 127.0.0.1 that
answers as AWS's IMDSv2 and GCP's metadata server document, the notice handed to the
control channel where the driver's SIGTERM relay puts one, and the region's key."""

from __future__ import annotations

import json
import threading
import time
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
from orchestrator.runtime.worker import watch_node
from orchestrator.wire.codec import to_plain
from orchestrator.wire.control import ControlChannel
from orchestrator.wire.sections import NoticeSection, NoticeSource
from servers import MetadataServer, Raw, free_port
from support import loop_spec

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


def test_aws_takes_a_token_once_and_asks_with_it_until_the_notice(aws: MetadataServer) -> None:
    source = notices.AwsMetadata(aws.endpoint)
    assert source.check() is None and source.check() is None
    (put, *gets) = aws.requests
    assert put[0:2] == ("PUT", "/latest/api/token") and put[2]["x-aws-ec2-metadata-token-ttl-seconds"] == "21600"
    assert [g[0:2] for g in gets] == [("GET", "/latest/meta-data/spot/instance-action")] * 2
    assert {g[2]["x-aws-ec2-metadata-token"] for g in gets} == aws.tokens
    aws.give_notice("stop", "2025-03-01T12:00:00Z")
    assert source.check() == Notice("aws", "stop", "2025-03-01T12:00:00+00:00")


def test_aws_takes_a_new_token_when_its_own_is_refused(aws: MetadataServer) -> None:
    source = notices.AwsMetadata(aws.endpoint)
    assert source.check() is None
    aws.tokens.clear()  # expired
    assert source.check() is None  # 401: no notice, the token dropped
    aws.give_notice()
    assert source.check() is not None
    assert [m for m, _, _ in aws.requests] == ["PUT", "GET", "GET", "PUT", "GET"]


def test_gcp_asks_with_its_flavor_header(gcp: MetadataServer) -> None:
    source = notices.GcpMetadata(gcp.endpoint)
    assert source.check() is None
    gcp.give_notice()
    assert source.check() == Notice("gcp", "preempted")
    assert all(h["metadata-flavor"] == "Google" for _, _, h in gcp.requests)
    assert {p for _, p, _ in gcp.requests} == {"/computeMetadata/v1/instance/preempted"}


def reports(sources: list[notices.Source]) -> tuple[NodeWatch, list[str]]:
    said: list[str] = []
    return NodeWatch(sources, lambda n: None, said.append, threading.Event()), said


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_a_malformed_service_is_no_notice_reported_once(cloud: str) -> None:
    with MetadataServer(cloud) as server:
        server.raw = Raw(200, b"<html>captive portal</html>", {"Metadata-Flavor": "Google"})
        watch, said = reports([notices.metadata_source(cloud, server.endpoint)])
        assert watch.poll() is None and watch.poll() is None
        assert len(said) == 1 and said[0].startswith(f"{cloud}: ") and "portal" not in said[0]
        server.raw = Raw(404)
        assert watch.poll() is None
        if cloud == "aws":  # no token: the token request answered 404
            assert said[1] == "aws: the token request answered HTTP 404"
        else:
            assert said[1] == "gcp: instance/preempted answered HTTP 404"


def test_a_refused_endpoint_is_no_notice_and_nothing_to_report() -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    watch, said = reports([notices.AwsMetadata(closed), notices.GcpMetadata(closed)])
    assert watch.poll() is None and said == []


def test_a_hung_service_costs_a_poll_its_timeout_and_no_more(aws: MetadataServer) -> None:
    aws.hang = True
    watch, said = reports([notices.AwsMetadata(aws.endpoint, timeout_s=0.2)])
    t0 = time.monotonic()
    assert watch.poll() is None
    assert time.monotonic() - t0 < 1.0 and said == []


def test_one_source_down_does_not_hide_the_others_notice(gcp: MetadataServer) -> None:
    gcp.give_notice()
    closed = notices.AwsMetadata(f"http://127.0.0.1:{free_port()}")
    watch, _ = reports([closed, notices.GcpMetadata(gcp.endpoint)])
    assert watch.poll() == Notice("gcp", "preempted")


def test_the_watch_hands_on_one_notice_and_retries_a_hand_on_that_failed(gcp: MetadataServer) -> None:
    got: list[Notice] = []

    def flaky(notice: Notice) -> None:
        if not got:
            got.append(notice)
            raise OSError("control channel down")
        got.append(notice)

    stop = threading.Event()
    gcp.give_notice()
    thread = NodeWatch([notices.GcpMetadata(gcp.endpoint)], flaky, lambda r: None, stop, poll_s=0.01).start()
    thread.join(timeout=5)
    assert not thread.is_alive() and len(got) == 2
    stop.set()


def test_a_stopped_watch_ends() -> None:
    stop = threading.Event()
    thread = NodeWatch([], lambda n: None, lambda r: None, stop, poll_s=0.01).start()
    stop.set()
    thread.join(timeout=2)
    assert not thread.is_alive()


# --- where a notice goes: the driver's path --------------------------------------------------------
def test_a_nodes_notice_reaches_the_control_channel_as_the_sigterm_relays_does(
    aws: MetadataServer, tmp_path: Path
) -> None:
    aws.give_notice()
    spec = loop_spec(
        tmp_path, "n", 3, {"name": "n", "workload": "digits"}, preemption_notice={"source": "aws", "url": aws.endpoint}
    )
    control = ControlChannel(spec.control_url)
    stop = threading.Event()
    watch_node(spec, control, rank=1, stop=stop)
    deadline = time.monotonic() + 5
    while not control.preempt_requested(3) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert control.preempt_requested(3)
    # The event is written just after the notice: waited for, not slept for (a busy machine).
    while time.monotonic() < deadline and not _notices(control, 3):
        time.sleep(0.01)
    stop.set()
    (event,) = _notices(control, 3)
    assert event.fields["source"] == "aws" and event.fields["action"] == "terminate" and event.fields["rank"] == 1
    assert event.fields["deadline"] == "2025-01-01T00:02:00+00:00"


def _notices(control: ControlChannel, generation: int) -> list:
    return [e for e in control.read_events(generation, set()) if e.kind == "preemption_notice"]


def test_a_malformed_answer_is_journaled_once_by_the_node(aws: MetadataServer, tmp_path: Path) -> None:
    aws.raw = Raw(500)
    spec = loop_spec(
        tmp_path, "n", 1, {"name": "n", "workload": "digits"}, preemption_notice={"source": "aws", "url": aws.endpoint}
    )
    control = ControlChannel(spec.control_url)
    stop = threading.Event()
    watch_node(spec, control, rank=0, stop=stop)
    deadline = time.monotonic() + 5
    while not control.read_events(1, set()) and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    (event,) = control.read_events(1, set())
    assert event.kind == "preemption_notice_invalid"
    assert event.fields["reason"] == "aws: the token request answered HTTP 500"
    assert not control.preempt_requested(1)


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
