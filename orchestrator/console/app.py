"""The console's routes: three pages, the JSON API their script polls, a run's figures,
and the stop, cancel and drill POSTs, behind ``security.Guard``.

Handlers that read files are plain functions (Starlette runs them in its thread pool);
the POSTs read their small bodies themselves (bounded, url-encoded) and call the same
code as ``action=stop``, ``action=cancel`` and ``action=drill`` (their ``ask``), with the
console as the request's source, and never wait for the controller: the run's page says
the request waits until the controller takes it, then how the run ended.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from orchestrator.commands import drill, stop
from orchestrator.console import plots
from orchestrator.console.regions import HomeRegions
from orchestrator.console.runpage import FactsCache, detail_json, read_error, run_detail
from orchestrator.console.runs import HomeRuns, run_href, runs_json
from orchestrator.console.security import Guard, Secrets, csrf_ok
from orchestrator.console.storeview import StoreView
from orchestrator.console.text import cut
from orchestrator.runstate import rundir
from orchestrator.runstate.losses import read_loss
from orchestrator.runstate.runfiles import DamagedFile

HERE = Path(__file__).parent
# A form's body: a CSRF token, a fault kind and a region fit many times over.
MAX_FORM_BYTES = 4096
# How often the pages' script asks again (milliseconds), as the page tells it.
POLL_MS = 2000
ACTIONS = ("stop", "cancel", "drill")
MAX_FIGURES = 32
# A live run's timeline runs to now: drawn again every this many seconds at most.
TIMELINE_EVERY_S = 10


@dataclass
class Console:
    """One server's state: its home, whether it acts, its secrets, and what it keeps read."""

    home: str
    keys: Secrets
    actions: bool = True
    # cloud.control_store's runs this home does not hold (read-only), when one is named.
    store: StoreView | None = None
    runs: HomeRuns = field(init=False)
    regions: HomeRegions = field(init=False)
    facts: FactsCache = field(init=False)
    # Figures drawn, by run, figure and the files they were drawn from: drawing one takes a
    # few hundred milliseconds, and every open page of the run asks for it.
    figures: dict[tuple[Any, ...], bytes] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.runs = HomeRuns(self.home)
        self.regions = HomeRegions(self.home)
        self.facts = FactsCache()

    def figure(self, key: tuple[Any, ...], draw: Any) -> bytes:
        """The figure drawn for ``key``, drawn now if it was not (the oldest few forgotten)."""
        svg = self.figures.get(key)
        if svg is None:
            svg = draw()
            if len(self.figures) >= MAX_FIGURES:
                self.figures.pop(next(iter(self.figures)), None)
            self.figures[key] = svg
        return svg

    def warm(self) -> None:
        """Read the home once, as the server starts (in a thread of its own): a home of a
        thousand runs takes seconds to read cold, and then milliseconds a poll."""
        self.runs.warm()
        self.regions.warm()


def templates() -> Jinja2Templates:
    # Autoescape on every template, and no filter here marks anything safe: whatever a
    # journal, a folder's name or an event holds is text on the page.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    return Jinja2Templates(env=env)


def run_name(request: Request) -> str | None:
    """The run the path names, or None for a name no run folder can have (a way out of
    home/runs: '..', a hidden name; or one longer than a file name)."""
    name = str(request.path_params.get("run_id", ""))
    if not name or name.startswith(".") or "/" in name or "\x00" in name or len(name.encode()) > 255:
        return None
    return name


def build(console: Console) -> Starlette:
    """The app: the routes behind the guard."""
    pages = templates()

    def base(request: Request, page: str, api: str, **context: Any) -> dict[str, Any]:
        return {
            "page": page,
            "api": api,
            "home": cut(console.home),
            "poll_ms": POLL_MS,
            "actions": console.actions,
            "csrf": console.keys.csrf,
            **context,
        }

    def store_rows() -> list[Any]:
        return console.store.rows() if console.store is not None else []

    def runs_page(request: Request) -> Response:
        status = filter_of(request)
        try:
            data = runs_json(console.runs, time.time(), status or None, store_rows())
        except DamagedFile as exc:
            return PlainTextResponse(read_error(exc), status_code=500)
        return pages.TemplateResponse(request, "runs.html", base(request, "runs", "/api/runs", data=data))

    def api_runs(request: Request) -> Response:
        status = filter_of(request)
        try:
            return JSONResponse(runs_json(console.runs, time.time(), status or None, store_rows()))
        except DamagedFile as exc:
            return JSONResponse({"error": read_error(exc)}, status_code=500)

    def detail_of(request: Request) -> tuple[dict[str, Any] | None, Response | None]:
        name = run_name(request)
        if name is None:
            return None, PlainTextResponse("404 Not Found: no such run\n", status_code=404)
        try:
            detail = run_detail(console.home, name, time.time(), console.facts)
            store = console.store
            if detail is None and store is not None and store.run(name) is not None:
                detail = from_store(store, name, run_detail(store.home, name, time.time(), console.facts))
        except DamagedFile as exc:
            return None, PlainTextResponse(f"409 Conflict: {read_error(exc)}\n", status_code=409)
        if detail is None:
            return None, PlainTextResponse("404 Not Found: no such run\n", status_code=404)
        return detail, None

    def run_page(request: Request, message: str = "", status_code: int = 200) -> Response:
        detail, refused = detail_of(request)
        if detail is None:
            return refused  # type: ignore[return-value]
        api = "/api" + detail["href"]
        context = base(request, "run", api, run=detail, message=message)
        return pages.TemplateResponse(request, "run.html", context, status_code=status_code)

    def api_run(request: Request) -> Response:
        detail, refused = detail_of(request)
        if detail is None:
            assert refused is not None
            return JSONResponse({"error": bytes(refused.body).decode().strip()}, status_code=refused.status_code)
        return JSONResponse(detail_json(detail))

    def regions_page(request: Request) -> Response:
        context = base(request, "regions", "/api/regions", regions=console.regions.regions(time.time()))
        return pages.TemplateResponse(request, "regions.html", context)

    def api_regions(request: Request) -> Response:
        return JSONResponse({"regions": console.regions.regions(time.time())})

    def figure(request: Request) -> Response:
        name = run_name(request)
        if name is None or request.path_params["figure"] not in ("loss", "timeline"):
            return PlainTextResponse("404 Not Found: no such figure\n", status_code=404)
        run_dir = rundir.run_path(console.home, name)
        if not os.path.lexists(run_dir) and console.store is not None and console.store.run(name) is not None:
            run_dir = rundir.run_path(console.store.home, name)
        kind = request.path_params["figure"]
        try:
            rundir.check_run_folder(run_dir)
            facts = console.facts.facts(run_dir)
            live = facts.stamps[1] is None
            now = time.time()
            if kind == "loss":
                svg = console.figure(
                    (run_dir, kind, facts.stamps), lambda: plots.loss_svg(facts.report, read_loss(run_dir))
                )
            else:
                key = (run_dir, kind, facts.stamps, int(now // TIMELINE_EVERY_S) if live else None)
                svg = console.figure(key, lambda: plots.timeline_svg(facts.events, now, live=live))
        except DamagedFile as exc:
            svg = plots.message_svg(read_error(exc))
        except Exception as exc:  # a journal whose values no figure can take: the page goes on without it
            svg = plots.message_svg(f"the figure could not be drawn ({type(exc).__name__})")
        return Response(svg, media_type="image/svg+xml")

    async def act(request: Request) -> Response:
        what = str(request.path_params["action"])
        if not console.actions:
            return PlainTextResponse("403 Forbidden: this console takes no actions (console.actions=false)\n", 403)
        name = run_name(request)
        if name is None or what not in ACTIONS:
            return PlainTextResponse("404 Not Found\n", status_code=404)
        form = await small_form(request)
        if not os.path.lexists(rundir.run_path(console.home, name)) and console.store is not None:
            if console.store.run(name) is not None:
                return PlainTextResponse(
                    "409 Conflict: a run read from cloud.control_store is acted on from its controller's machine\n", 409
                )
        if form is None or not csrf_ok(form, console.keys):
            return PlainTextResponse("403 Forbidden: the form's CSRF token is missing or not this console's\n", 403)
        said = await run_in_threadpool(ask, console.home, name, what, form)
        if said:
            return await run_in_threadpool(run_page, request, said, 409)
        # Asked: the run's page, which says so until the controller takes the request.
        return RedirectResponse(run_href(name), status_code=303)

    routes = [
        Route("/", runs_page),
        Route("/regions", regions_page),
        Route("/runs/{run_id}", run_page),
        Route("/runs/{run_id}/{figure:str}.svg", figure),
        Route("/runs/{run_id}/{action}", act, methods=["POST"]),
        Route("/api/runs", api_runs),
        Route("/api/runs/{run_id}", api_run),
        Route("/api/regions", api_regions),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(Guard, keys=console.keys)
    return app


def from_store(store: StoreView, run_id: str, detail: dict[str, Any] | None) -> dict[str, Any] | None:
    """A store run's page: what its mirror says, where it was read, whether its
    controller's lease holds, and the commands that read it or take it over from here."""
    run = store.run(run_id)
    if detail is None or run is None:
        return detail
    where = run.where
    held = {True: "alive (its lease in the control store holds)", False: "no controller holds its lease"}
    status = f"python -m orchestrator action=status run_id={run_id} cloud.control_store={store.store}"
    report = f"python -m orchestrator action=report run_id={run_id} cloud.control_store={store.store}"
    return {
        **detail,
        "note": cut(where.source),
        "controller": held.get(where.alive, "its lease in the control store cannot be read"),
        "live": False,  # acted on from its controller's machine, not from here
        "commands": [("status", cut(status)), ("report", cut(report)), ("take over", cut(where.go_on))],
    }


def filter_of(request: Request) -> str:
    """The status the runs are filtered by ("": every run)."""
    return (request.query_params.get("status") or "")[:40].strip()


async def small_form(request: Request) -> dict[str, str] | None:
    """A url-encoded form of at most MAX_FORM_BYTES, each field's last value; None for
    anything else (a body too long, another encoding)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        return None
    return {k: v[-1] for k, v in fields.items()}


def ask(home: str, run_id: str, what: str, form: dict[str, str]) -> str:
    """``what`` asked of the run as its command asks it, from the console: "" once asked,
    else why not (one line)."""
    try:
        rundir.check_run_folder(rundir.run_path(home, run_id))
        if what == "drill":
            asked = drill.ask(home, run_id, form.get("fault", ""), form.get("region") or None, source="console")
        else:
            asked = stop.ask(home, run_id, what, source="console")
    except DamagedFile as exc:
        return read_error(exc)
    return "" if asked.request is not None else cut(asked.said)
