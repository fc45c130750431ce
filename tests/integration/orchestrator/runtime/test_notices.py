"""Preemption notices from the cloud's instance metadata and Ray's drain, without Ray: the
answers read strictly, the watch polled against a real HTTP server on 127.0.0.1 that
answers as AWS's IMDSv2 and GCP's metadata server document, the notice handed to the
control channel where the driver's SIGTERM relay puts one, and the region's key.

Here the tests that start a process, open a socket or start Ray; the rest are unit tests
(the same path under tests/unit)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from orchestrator.runtime import notices
from orchestrator.runtime.loop.worker import watch_node
from orchestrator.runtime.notices import NodeWatch, Notice
from orchestrator.wire.control import ControlChannel
from tests.support.runs import loop_spec
from tests.support.servers import MetadataServer, Raw, free_port

pytestmark = pytest.mark.integration


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
    assert time.monotonic() - t0 < 3.0 and said == []  # one 0.2 s poll, not a hang (a loaded machine is slow)


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
