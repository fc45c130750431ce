"""action=console's start: the URL it prints, a port it cannot have, a host beyond this
machine (no socket is opened here: the unit tier opens none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.compose import compose
from orchestrator.console import server

pytestmark = pytest.mark.unit


class FakeSock:
    def __init__(self, address: str, port: int = 8123) -> None:
        self.name = (address, port)
        self.closed = False

    def getsockname(self) -> tuple[str, int]:
        return self.name

    def close(self) -> None:
        self.closed = True


def test_the_url_names_the_address_bound_and_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server.socket, "gethostname", lambda: "box")
    assert server.url_of(FakeSock("127.0.0.1"), "t0k") == "http://127.0.0.1:8123/?token=t0k"  # type: ignore[arg-type]
    assert server.url_of(FakeSock("::1"), "t") == "http://[::1]:8123/?token=t"  # type: ignore[arg-type]
    assert server.url_of(FakeSock("0.0.0.0"), "t") == "http://box:8123/?token=t"  # type: ignore[arg-type]
    assert server.is_loopback(FakeSock("127.0.0.1")) and not server.is_loopback(FakeSock("10.0.0.2"))  # type: ignore[arg-type]


def run_main(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *overrides: str) -> tuple[int, FakeSock, list[Any]]:
    sock = FakeSock("10.1.2.3" if any("host" in o for o in overrides) else "127.0.0.1")
    served: list[Any] = []
    monkeypatch.setattr(server, "bind", lambda host, port: sock)
    import uvicorn

    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: served.append((self.config, sockets)))
    cfg = compose(["action=console", f"home={tmp_path}", *overrides])
    return server.main(cfg), sock, served


def test_it_prints_one_url_serves_until_stopped_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, sock, served = run_main(monkeypatch, tmp_path)
    out = capsys.readouterr()
    assert code == 0 and sock.closed and out.err == ""
    urls = [w for w in out.out.split() if w.startswith("http://")]
    assert len(urls) == 1 and urls[0].startswith("http://127.0.0.1:8123/?token=")
    ((config, sockets),) = served
    assert sockets == [sock] and config.access_log is False and config.lifespan == "off"


def test_another_host_is_bound_only_when_named_and_said(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert compose(["action=console"]).console.host == "127.0.0.1"
    code, _, _ = run_main(monkeypatch, tmp_path, "console.host=10.1.2.3", "console.actions=false")
    out = capsys.readouterr()
    assert code == 0 and "reachable from other machines" in out.err and "console.actions=false" in out.out


def test_a_port_it_cannot_have_is_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def taken(host: str, port: int) -> Any:
        raise OSError(98, "Address already in use")

    monkeypatch.setattr(server, "bind", taken)
    assert server.main(compose(["action=console", f"home={tmp_path}", "console.port=8123"])) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: console.port: cannot listen on 127.0.0.1:8123 (Address already in use)")


def test_the_quiet_handler_does_nothing() -> None:
    assert server._quiet(2, None) is None
