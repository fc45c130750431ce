"""The console's routes, in-process (Starlette's TestClient, no socket): the token on every
path, its cookie, the headers on every answer, markup from runs shown as text, the
guarded actions and what they write."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

import pytest

from orchestrator.control.stopreq import DRILL_NAME, STOP_NAME, parse_request, this_request
from orchestrator.runstate import events as E
from orchestrator.runstate import rundir
from orchestrator.runstate.journal import Journal
from tests.unit.orchestrator.console.conftest import (
    HOSTILE_DETAIL,
    HOSTILE_JOB,
    HOSTILE_RUN,
    LIVE,
    client_of,
    signed_in,
)

pytestmark = pytest.mark.unit

ROUTES = [
    ("GET", "/"),
    ("GET", "/?status=RUNNING"),
    ("GET", "/regions"),
    ("GET", f"/runs/{LIVE}"),
    ("GET", f"/runs/{LIVE}/loss.svg"),
    ("GET", f"/runs/{LIVE}/timeline.svg"),
    ("GET", "/api/runs"),
    ("GET", f"/api/runs/{LIVE}"),
    ("GET", "/api/regions"),
    ("GET", "/static/console.js"),
    ("GET", "/static/console.css"),
    ("GET", "/static/missing.js"),
    ("GET", "/no/such/path"),
    ("HEAD", "/"),
    ("POST", f"/runs/{LIVE}/stop"),
    ("POST", f"/runs/{LIVE}/cancel"),
    ("POST", f"/runs/{LIVE}/drill"),
]
SECURITY = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def secured(headers: object) -> bool:
    return all(headers.get(k) == v for k, v in SECURITY.items())  # type: ignore[attr-defined]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_path_answers_401_without_the_token_and_with_a_wrong_one(home: Path, method: str, path: str) -> None:
    client, keys = client_of(home)
    res = client.request(method, path, data={"csrf": "x"} if method == "POST" else None)
    assert res.status_code == 401 and secured(res.headers)
    assert "set-cookie" not in res.headers
    wrong = "0" * len(keys.token)
    sep = "&" if "?" in path else "?"
    assert client.request(method, f"{path}{sep}token={wrong}").status_code == 401
    client.cookies.set(keys.cookie, wrong)
    assert client.request(method, path).status_code == 401
    assert not (home / "runs" / LIVE / STOP_NAME).exists()


def test_the_token_once_then_an_httponly_strict_cookie_carries_it(home: Path) -> None:
    client, keys = client_of(home)
    res = client.get(f"/runs/{LIVE}?token={keys.token}&tab=x")
    assert res.status_code == 303 and secured(res.headers)
    # The same page again, without the token in its address.
    assert res.headers["location"] == f"/runs/{LIVE}?tab=x"
    cookie = res.headers["set-cookie"]
    assert cookie.startswith(f"{keys.cookie}={keys.token};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    page = client.get(f"/runs/{LIVE}")
    assert page.status_code == 200 and LIVE in page.text
    # The cookie alone opens every path, static files included.
    assert client.get("/static/console.js").status_code == 200
    assert client.get("/api/runs").status_code == 200


def test_the_token_redirect_never_points_to_another_host(home: Path) -> None:
    client, keys = client_of(home)
    res = client.get(f"//evil.example/x?token={keys.token}")
    assert (
        res.status_code == 303
        and res.headers["location"].startswith("/")
        and not res.headers["location"].startswith("//")
    )


@pytest.mark.parametrize(("method", "path"), [r for r in ROUTES if r[0] != "POST"])
def test_every_answer_carries_the_security_headers(home: Path, method: str, path: str) -> None:
    client, _ = signed_in(home)
    res = client.request(method, path)
    assert res.status_code in (200, 404) and secured(res.headers), (path, res.status_code)


def test_pages_and_figures_answer_with_their_content(home: Path) -> None:
    client, _ = signed_in(home)
    assert client.get("/").headers["content-type"].startswith("text/html")
    svg = client.get("/runs/digits-failover/loss.svg")
    assert svg.headers["content-type"] == "image/svg+xml" and b"<svg" in svg.content
    assert b"<svg" in client.get("/runs/digits-failover/timeline.svg").content
    assert client.get("/runs/digits-failover/other.svg").status_code == 404


@pytest.mark.parametrize(
    "path", ["/", "/regions", f"/runs/{quote(HOSTILE_RUN, safe='')}", "/api/runs", f"/api/runs/{LIVE}"]
)
def test_markup_in_a_run_name_a_job_name_or_an_event_is_text(home: Path, path: str) -> None:
    client, _ = signed_in(home)
    res = client.get(path)
    assert res.status_code == 200, res.text
    for raw in ("<script>", "<img src=x", "<b>"):
        assert raw not in res.text or res.headers["content-type"].startswith("application/json"), path
    if res.headers["content-type"].startswith("text/html"):
        assert "&lt;script&gt;" in res.text or path == f"/runs/{LIVE}"


def test_the_hostile_runs_page_shows_each_value_escaped(home: Path) -> None:
    client, _ = signed_in(home)
    page = client.get(f"/runs/{quote(HOSTILE_RUN, safe='')}").text
    assert "&lt;script&gt;alert(&#39;run&#39;)&lt;" in page
    assert "&lt;script&gt;alert(&#39;job&#39;)&lt;/script&gt;" in page
    assert "&lt;script&gt;alert(&#39;standby&#39;)&lt;/script&gt;" in page
    assert HOSTILE_JOB not in page and HOSTILE_DETAIL not in page
    runs = client.get("/").text
    assert f'href="/runs/{quote(HOSTILE_RUN, safe="")}"' in runs
    detail = client.get(f"/api/runs/{quote(HOSTILE_RUN, safe='')}").json()
    assert detail["job"] == HOSTILE_JOB  # data for the script, which sets it as text
    svg = client.get(f"/runs/{quote(HOSTILE_RUN, safe='')}/timeline.svg").content
    assert b"<script" not in svg and b"<img" not in svg


def test_a_name_that_leads_out_of_the_runs_folder_is_no_run(home: Path) -> None:
    client, _ = signed_in(home)
    # (A bare '..' the client itself resolves before sending.)
    for name in ("%2E%2E", "%2e%2e", ".hidden", "nope", "x" * 300):
        assert client.get(f"/runs/{name}").status_code == 404
        assert client.get(f"/api/runs/{name}").status_code == 404


def test_the_runs_api_filters_by_status_and_sees_a_journal_grow(home: Path) -> None:
    client, _ = signed_in(home)
    everything = client.get("/api/runs").json()
    assert everything["total"] == 4 and {"SUCCEEDED", "RUNNING"} <= set(everything["statuses"])
    only = client.get("/api/runs?status=SUCCEEDED").json()
    assert {r["run_id"] for r in only["runs"]} == {"digits-clean", "digits-failover"}
    live = next(r for r in everything["runs"] if r["run_id"] == LIVE)
    assert live["status"] == "RUNNING" and [c["step"] for c in live["checkpoints"]] == [100, 100]
    Journal(str(home / "runs" / LIVE / "journal.jsonl")).emit(
        E.RuntimeReport(
            kind="checkpoint_committed", fields={"by": "runtime", "generation": 1, "step": 200, "region": "local-a"}
        )
    )
    again = next(r for r in client.get("/api/runs").json()["runs"] if r["run_id"] == LIVE)
    assert [(c["region"], c["step"]) for c in again["checkpoints"]] == [("local-a", 200), ("local-b", 100)]
    runs_page = client.get("/?status=SUCCEEDED").text
    assert "digits-clean" in runs_page and LIVE not in runs_page


def test_a_stop_writes_the_request_action_stop_writes_with_the_console_as_its_source(home: Path) -> None:
    client, keys = signed_in(home)
    page = client.get(f"/runs/{LIVE}").text
    assert f'name="csrf" value="{keys.csrf}"' in page and 'id="stop"' in page
    res = client.post(f"/runs/{LIVE}/stop", data={"csrf": keys.csrf})
    assert res.status_code == 303 and res.headers["location"] == f"/runs/{LIVE}" and secured(res.headers)
    path = home / "runs" / LIVE / STOP_NAME
    assert path.stat().st_mode & 0o777 == 0o600
    written = json.loads(path.read_text())
    req = parse_request(path.read_bytes())
    cli = this_request("stop")
    assert req is not None and (req.action, req.source, req.who()) == ("stop", "console", cli.who())
    assert set(written) == {*cli.as_json(), "source"} and written["source"] == "console"
    # The page says so until the controller takes it.
    after = client.get(f"/runs/{LIVE}").text
    assert "stop asked (" in after and "from the console" in after and "waiting for its controller" in after


def test_a_cancel_and_a_drill_write_their_requests(home: Path) -> None:
    client, keys = signed_in(home)
    assert client.post(f"/runs/{LIVE}/cancel", data={"csrf": keys.csrf}).status_code == 303
    cancel = parse_request((home / "runs" / LIVE / STOP_NAME).read_bytes())
    assert cancel is not None and (cancel.action, cancel.source) == ("cancel", "console")
    res = client.post(f"/runs/{LIVE}/drill", data={"csrf": keys.csrf, "fault": "kill_region", "region": ""})
    assert res.status_code == 303, res.text
    drill = parse_request((home / "runs" / LIVE / DRILL_NAME).read_bytes())
    assert drill is not None and (drill.fault, drill.source) == ({"kind": "kill_region"}, "console")


@pytest.mark.parametrize("form", [{}, {"csrf": ""}, {"csrf": "not-it"}, {"other": "x"}])
def test_a_post_without_this_consoles_csrf_token_is_refused(home: Path, form: dict[str, str]) -> None:
    client, _ = signed_in(home)
    for action in ("stop", "cancel", "drill"):
        res = client.post(f"/runs/{LIVE}/{action}", data=form)
        assert res.status_code == 403 and secured(res.headers)
    assert not (home / "runs" / LIVE / STOP_NAME).exists() and not (home / "runs" / LIVE / DRILL_NAME).exists()


def test_another_consoles_csrf_token_is_refused(home: Path) -> None:
    client, _ = signed_in(home)
    _, other = client_of(home)
    assert client.post(f"/runs/{LIVE}/stop", data={"csrf": other.csrf}).status_code == 403


def test_a_post_from_another_sites_page_is_refused(home: Path) -> None:
    client, keys = signed_in(home)
    res = client.post(f"/runs/{LIVE}/stop", data={"csrf": keys.csrf}, headers={"origin": "http://evil.example"})
    assert res.status_code == 403
    assert not (home / "runs" / LIVE / STOP_NAME).exists()
    ours = client.post(f"/runs/{LIVE}/stop", data={"csrf": keys.csrf}, headers={"origin": "http://testserver"})
    assert ours.status_code == 303


def test_a_form_too_long_or_not_url_encoded_is_refused(home: Path) -> None:
    client, keys = signed_in(home)
    long = client.post(f"/runs/{LIVE}/stop", data={"csrf": keys.csrf, "pad": "x" * 5000})
    as_json = client.post(f"/runs/{LIVE}/stop", json={"csrf": keys.csrf})
    assert long.status_code == 403 and as_json.status_code == 403


def test_with_actions_off_the_buttons_go_and_the_posts_answer_403(home: Path) -> None:
    client, keys = signed_in(home, actions=False)
    page = client.get(f"/runs/{LIVE}").text
    assert 'method="post"' not in page and 'id="stop"' not in page and 'name="csrf"' not in page
    assert "console.actions=false" in page
    for action in ("stop", "cancel", "drill"):
        res = client.post(f"/runs/{LIVE}/{action}", data={"csrf": keys.csrf, "fault": "kill_region"})
        assert res.status_code == 403 and "console.actions=false" in res.text
    assert not os.path.exists(home / "runs" / LIVE / STOP_NAME)


def test_a_run_with_no_controller_to_ask_is_said_on_its_page(home: Path) -> None:
    client, keys = signed_in(home)
    res = client.post("/runs/digits-clean/stop", data={"csrf": keys.csrf})
    assert res.status_code == 409 and "already ended (SUCCEEDED); nothing to stop" in res.text
    assert 'id="actions" class="actions" hidden' in res.text
    drill = client.post(f"/runs/{LIVE}/drill", data={"csrf": keys.csrf, "fault": "<b>boom</b>"})
    assert drill.status_code == 409 and "&lt;b&gt;boom" in drill.text and "<b>boom" not in drill.text
    assert not (home / "runs" / "digits-clean" / STOP_NAME).exists()


def test_a_damaged_run_folder_is_said_not_raised(home: Path) -> None:
    client, keys = signed_in(home)
    os.mkdir(home / "runs" / LIVE / STOP_NAME)  # a folder where the request would go
    res = client.post(f"/runs/{LIVE}/stop", data={"csrf": keys.csrf})
    assert res.status_code == 409 and STOP_NAME in res.text
    assert client.get("/").status_code == 200


def test_a_missing_home_is_an_empty_list(tmp_path: Path) -> None:
    client, keys = client_of(tmp_path / "nowhere")
    client.get(f"/?token={keys.token}")
    assert "no runs" in client.get("/").text and client.get("/api/runs").json()["runs"] == []
    assert client.get("/api/regions").json() == {"regions": []}


def test_the_run_api_gives_the_fields_the_script_updates(home: Path) -> None:
    client, _ = signed_in(home)
    run = client.get("/api/runs/digits-failover").json()
    assert run["status"] == "SUCCEEDED" and run["fields"]["f-status"] == "SUCCEEDED"
    (incident,) = run["tables"]["incidents"]
    assert incident[5] == "local-a -> local-b" and incident[6:8] == ["50", "10"]
    assert {row[0] for row in run["tables"]["stores"]} == {"local-a", "local-b", "local-c"}
    live = client.get(f"/api/runs/{LIVE}").json()
    assert live["live"] is True and live["fields"]["f-controller"].startswith("pid 1 on box")
    assert rundir.run_path(str(home), LIVE).endswith(LIVE)


def test_a_figure_is_drawn_once_while_its_runs_files_stay_as_they_were(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.console import plots

    drawn: list[str] = []
    real = plots.loss_svg
    monkeypatch.setattr(plots, "loss_svg", lambda *a: drawn.append("loss") or real(*a))
    client, _ = signed_in(home)
    first = client.get("/runs/digits-failover/loss.svg").content
    assert client.get("/runs/digits-failover/loss.svg").content == first and drawn == ["loss"]
    Journal(str(home / "runs" / "digits-failover" / "journal.jsonl")).emit(E.RunResumed(pid=9))
    client.get("/runs/digits-failover/loss.svg")
    assert drawn == ["loss", "loss"]
