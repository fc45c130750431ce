// The console's live updates: the runs table and a run's page ask the JSON API every
// poll interval and put what it says in place. Everything from the server is text: it is
// set with textContent and attributes, never parsed as markup (no innerHTML anywhere).
"use strict";

(function () {
  const body = document.body;
  const api = body.dataset.api;
  const page = body.dataset.page;
  const pollMs = Math.max(500, Number(body.dataset.pollMs) || 2000);
  let timer = null;
  let busy = false;

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function setText(id, text) {
    const e = document.getElementById(id);
    if (e && e.textContent !== text) e.textContent = text;
  }

  function said(state) {
    setText("live-state", state);
  }

  async function getJson(url) {
    // Same origin: the cookie carries the token; a 401 means the console restarted.
    const res = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (res.status === 401) throw new Error("the console's token changed (restarted?): open its new URL");
    if (!res.ok) throw new Error("the console answered " + res.status);
    return res.json();
  }

  // --- the runs page -----------------------------------------------------------------

  function runRow(r) {
    const tr = el("tr");
    const first = el("td", null, "run");
    const a = el("a", r.run_id);
    a.setAttribute("href", r.href); // "/runs/<quoted id>", made by the server
    first.appendChild(a);
    if (r.reason) first.appendChild(el("div", r.reason, "reason"));
    tr.appendChild(first);
    const status = el("span", r.status, "status");
    status.dataset.status = r.status;
    const td = el("td");
    td.appendChild(status);
    tr.appendChild(td);
    tr.appendChild(el("td", r.job || "-"));
    tr.appendChild(el("td", r.region || "-"));
    const step = el("td", r.text.step, "step");
    if (r.progress !== null && r.progress !== undefined) {
      const p = el("progress");
      p.max = 1;
      p.value = r.progress;
      step.appendChild(p);
    }
    tr.appendChild(step);
    const ckpt = el("td", null, "ckpt");
    if (r.checkpoints.length === 0) ckpt.textContent = "-";
    for (const c of r.checkpoints) ckpt.appendChild(el("div", c.text));
    tr.appendChild(ckpt);
    tr.appendChild(el("td", r.text.goodput, "num"));
    tr.appendChild(el("td", r.text.cost, "num"));
    tr.appendChild(el("td", r.text.incidents, "num"));
    tr.appendChild(el("td", r.text.started));
    tr.appendChild(el("td", r.text.duration, "num"));
    return tr;
  }

  function statusFilter() {
    const s = document.getElementById("status");
    return s ? s.value : "";
  }

  function syncStatuses(statuses, chosen) {
    const select = document.getElementById("status");
    if (!select) return;
    const want = [""].concat(statuses);
    if (chosen && want.indexOf(chosen) < 0) want.push(chosen);
    const have = Array.from(select.options).map((o) => o.value);
    if (have.join("\n") === want.join("\n")) return;
    select.replaceChildren();
    for (const s of want) {
      const o = el("option", s === "" ? "all" : s);
      o.value = s;
      o.selected = s === chosen;
      select.appendChild(o);
    }
  }

  async function refreshRuns() {
    const chosen = statusFilter();
    const data = await getJson(api + (chosen ? "?status=" + encodeURIComponent(chosen) : ""));
    const tbody = document.getElementById("runs-body");
    const rows = data.runs.map(runRow);
    if (rows.length === 0) {
      const tr = el("tr");
      const td = el("td", chosen ? "no runs with status " + chosen : "no runs under this home yet", "empty");
      td.colSpan = 11;
      tr.appendChild(td);
      rows.push(tr);
    }
    tbody.replaceChildren(...rows);
    setText("runs-count", data.runs.length + " of " + data.total);
    syncStatuses(data.statuses, chosen);
  }

  // --- a run's page --------------------------------------------------------------------

  function fillTable(id, rows) {
    const tbody = document.getElementById(id);
    if (!tbody) return;
    const width = tbody.parentElement.querySelectorAll("thead th").length || 1;
    const trs = rows.map((row) => {
      const tr = el("tr");
      for (const cell of row) tr.appendChild(el("td", cell));
      return tr;
    });
    if (trs.length === 0) {
      const td = el("td", "none", "empty");
      td.colSpan = width;
      const tr = el("tr");
      tr.appendChild(td);
      trs.push(tr);
    }
    tbody.replaceChildren(...trs);
  }

  function setFigure(id, href, version) {
    const img = document.getElementById(id);
    const want = href + "/" + id + ".svg?v=" + encodeURIComponent(version);
    if (img && img.getAttribute("src") !== want) img.setAttribute("src", want);
  }

  async function refreshRun() {
    const run = await getJson(api);
    for (const [id, text] of Object.entries(run.fields)) setText(id, text);
    const status = document.getElementById("f-status");
    if (status) status.dataset.status = run.status;
    const progress = document.getElementById("f-progress");
    if (progress) progress.value = run.progress === null ? 0 : run.progress;
    for (const [name, rows] of Object.entries(run.tables)) fillTable("t-" + name, rows);
    const actions = document.getElementById("actions");
    if (actions) actions.hidden = !run.live;
    const none = document.getElementById("no-actions");
    if (none) none.hidden = run.live;
    setFigure("timeline", run.href, run.plot + (run.live ? "-" + Math.floor(Date.now() / 10000) : ""));
    setFigure("loss", run.href, run.plot);
  }

  // --- polling -------------------------------------------------------------------------

  const refresh = { runs: refreshRuns, run: refreshRun }[page];

  async function tick() {
    if (busy) return;
    busy = true;
    try {
      await refresh();
      said("live: updated " + new Date().toLocaleTimeString());
    } catch (err) {
      said("not updated: " + err.message);
    } finally {
      busy = false;
    }
  }

  if (refresh) {
    timer = window.setInterval(tick, pollMs);
    const select = document.getElementById("status");
    const form = document.getElementById("filter");
    if (select && form) {
      select.addEventListener("change", () => {
        const url = new URL(window.location.href);
        if (select.value) url.searchParams.set("status", select.value);
        else url.searchParams.delete("status");
        window.history.replaceState(null, "", url.pathname + url.search);
        tick();
      });
    }
  }
  window.addEventListener("beforeunload", () => {
    if (timer !== null) window.clearInterval(timer);
  });
})();
