"""The console with a control store (orchestrator/console/storeview.py): another home's
runs, read from their verified mirrors, listed after this home's, each with its page;
a forged mirror is a row that says so; nothing of the store's is acted on."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from orchestrator.commands.remote import StoreError
from orchestrator.console import storeview
from orchestrator.console.app import Console, build
from orchestrator.console.security import Secrets
from orchestrator.console.storeview import StoreView
from tests.support.mirrored import hold_lease, mirror, write_run

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

KEY = ("c0ffee" * 11).encode()


def _store_and_view(tmp_path: Path, local: set[str]) -> tuple[str, StoreView]:
    store = f"file://{tmp_path}/ctl"
    teammate = tmp_path / "teammate"
    for run_id, ended in (("r-done", "SUCCEEDED"), ("r-live", None), ("mine", "SUCCEEDED")):
        mirror(write_run(teammate, run_id, store, ended=ended, losses=20), store, KEY)
    hold_lease(store, KEY, "r-live")
    # A mirror sealed with another key: whoever wrote it holds no key of ours.
    mirror(write_run(tmp_path / "stranger", "r-forged", store, job="<script>x</script>"), store, b"f" * 64)
    view = StoreView(store, None, KEY, lambda: local)
    view.refresh()
    return store, view


def test_the_store_s_runs_are_listed_after_this_home_s_and_a_forged_one_says_so(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_run(home, "mine", "file:///elsewhere")
    _store, view = _store_and_view(tmp_path, {"mine"})
    try:
        assert view.error == ""
        keys = Secrets.new(8000)
        client = TestClient(build(Console(str(home), keys, True, view)), follow_redirects=False)
        assert client.get(f"/?token={keys.token}").status_code == 303
        runs = {r["run_id"]: r for r in client.get("/api/runs").json()["runs"]}
        assert set(runs) == {"mine", "r-done", "r-live", "r-forged"}
        assert runs["mine"].get("source") in (None, "local")  # this home's copy, not the store's
        assert runs["r-done"]["source"] == "store" and runs["r-done"]["status"] == "SUCCEEDED"
        assert runs["r-live"]["status"] == "RUNNING"
        assert runs["r-forged"]["status"] == "UNVERIFIED" and runs["r-forged"]["job"] in (None, "-")
        page = client.get("/")
        assert "&lt;script&gt;" not in page.text and "<script>x" not in page.text  # none of its content at all
    finally:
        view.close()
    assert not Path(view.home).exists()


def test_a_store_run_has_its_page_but_takes_no_action_from_here(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    store, view = _store_and_view(tmp_path, set())
    try:
        keys = Secrets.new(8000)
        client = TestClient(build(Console(str(home), keys, True, view)), follow_redirects=False)
        client.get(f"/?token={keys.token}")
        detail = client.get("/api/runs/r-live").json()
        assert "control_store" in detail["note"] and detail["controller"].startswith("alive")
        page = client.get("/runs/r-live")
        assert page.status_code == 200 and "action=resume run_id=r-live" in page.text
        assert f"cloud.control_store={store}" in page.text
        assert client.get("/runs/r-done/loss.svg").headers["content-type"].startswith("image/svg")
        refused = client.post("/runs/r-live/stop", data={"csrf": keys.csrf})
        assert refused.status_code == 409 and "its controller's machine" in refused.text
        assert not (home / "runs" / "r-live").exists()
    finally:
        view.close()


def test_a_store_that_cannot_be_read_keeps_what_was_read_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store, view = _store_and_view(tmp_path, set())
    try:
        before = {r.run_id for r, _ in view.rows()}

        def unreachable(*_: object, **__: object) -> None:
            raise StoreError("cloud.control_store: cannot read s3://team (ConnectionError: refused)")

        monkeypatch.setattr(storeview, "store_runs", unreachable)
        view.refresh()
        assert view.error.startswith("cloud.control_store")
        assert {r.run_id for r, _ in view.rows()} == before
    finally:
        view.close()
