// rebound's status page: renders each snapshot of /v1/rebound/status/events. Built into the
// binary; it loads nothing from anywhere else.
"use strict";

const STATE_LABELS = {
  closed: "healthy",
  cooling: "cooling down",
  open: "circuit open",
  probing: "probing",
};
const CLASS_COLOURS = {
  ok: "#2e7d32", transient: "#b26a00", rate_limit: "#6a1b9a", quota: "#c62828",
  unclassified: "#607d8b",
};

let latest = null;
let skew = 0; // server clock minus this browser's, from the latest snapshot

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const child of children) {
    node.append(child === null || child === undefined ? "" : child);
  }
  return node;
}

function serverNow() { return Date.now() + skew; }

function left(untilMs) {
  if (untilMs === null || untilMs === undefined) return "";
  const ms = Math.max(0, untilMs - serverNow());
  const s = Math.ceil(ms / 1000);
  if (s >= 3600) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  if (s >= 60) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${s}s`;
}

function clock(ms) {
  if (ms === null || ms === undefined) return "";
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

function replaceRows(table, rows) {
  const body = document.querySelector(`#${table} tbody`);
  body.replaceChildren(...rows);
}

function renderCandidates(snap) {
  const health = snap.health || {};
  document.getElementById("health-off").hidden = health.enabled !== false;
  const byId = new Map((health.candidates || []).map((c) => [c.id, c]));
  const rows = [];
  const listed = new Set();
  const row = (route, c) => {
    const state = c.state || "closed";
    return el("tr", { "data-candidate": c.id, "data-state": state },
      el("td", {}, route),
      el("td", {}, c.id),
      el("td", { class: `state ${state}` }, STATE_LABELS[state] || state),
      el("td", {}, clock(c.until_ms)),
      el("td", { class: "left", "data-until": c.until_ms ?? "" }, left(c.until_ms)),
      el("td", {}, c.class || ""),
      el("td", {}, c.code || ""),
      el("td", {}, c.rule_id || ""),
      el("td", {}, c.last_probe ? `${clock(c.last_probe.at_ms)} ${c.last_probe.succeeded ? "ok" : "failed"}` : ""));
  };
  for (const route of snap.routes || []) {
    for (const id of route.candidates) {
      const c = byId.get(id) || { id, state: "closed" };
      listed.add(id);
      rows.push(row(route.id, c));
      for (const key of c.keys || []) { listed.add(key.id); rows.push(row(route.id, key)); }
    }
  }
  for (const c of health.candidates || []) {
    if (!listed.has(c.id)) rows.push(row("", c));
  }
  replaceRows("candidates", rows);
}

function renderWaiting(snap) {
  const waits = snap.waiting || [];
  document.getElementById("waiting-count").textContent = String(waits.length);
  document.getElementById("waiting-none").hidden = waits.length > 0;
  replaceRows("waiting", waits.map((w) => el("tr", { class: "wait", "data-candidate": w.candidate },
    el("td", {}, w.route),
    el("td", {}, w.candidate),
    el("td", { class: "num" }, `${w.attempt}`),
    el("td", {}, w.class),
    el("td", { class: "left", "data-until": w.until_ms }, left(w.until_ms)),
    el("td", { class: "countdown" }, w.text))));
}

async function act(job, action) {
  const result = document.getElementById("action-result");
  result.textContent = `${action} ${job.id}…`;
  try {
    const response = await fetch(`/v1/rebound/status/jobs/${encodeURIComponent(job.id)}/${action}`, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-rebound-action": "1" },
      body: JSON.stringify({ generation: job.generation }),
    });
    const body = await response.json().catch(() => ({}));
    result.textContent = response.ok
      ? `${action}: ${job.id} is now ${body.state}`
      : `${action} refused: ${(body.error && body.error.message) || response.status}`;
  } catch (e) {
    result.textContent = `${action} failed: ${e}`;
  }
}

function renderJobs(snap) {
  const jobs = snap.jobs || { enabled: false, list: [] };
  document.getElementById("jobs-off").hidden = jobs.enabled;
  replaceRows("jobs", (jobs.list || []).map((j) => {
    const open = !["succeeded", "failed", "stopped"].includes(j.state);
    const actions = el("td", {});
    if (open) {
      for (const action of ["retry", "skip", "stop"]) {
        const button = el("button", { type: "button", "data-action": action }, action);
        button.addEventListener("click", () => act(j, action));
        actions.append(button);
      }
    }
    return el("tr", { "data-job": j.id, "data-generation": j.generation },
      el("td", {}, j.id),
      el("td", { class: `state ${j.state}` }, j.state),
      el("td", {}, j.route_id),
      el("td", {}, j.candidate || ""),
      el("td", { class: "num" }, `${j.attempts}`),
      el("td", {}, j.pending_outcome || ""),
      el("td", {}, clock(j.deadline_ms)),
      el("td", { class: "left", "data-until": j.deadline_ms ?? "" }, left(j.deadline_ms)),
      el("td", {}, j.code || ""),
      actions);
  }));
}

function renderFailures(snap) {
  replaceRows("failures", (snap.failures || []).map((f) => el("tr", {},
    el("td", {}, clock(f.at_ms)),
    el("td", {}, f.route),
    el("td", {}, f.candidate),
    el("td", { class: "num" }, f.status ?? "—"),
    el("td", {}, f.code || ""),
    el("td", {}, f.class),
    el("td", {}, f.rule_id || ""),
    el("td", { class: "excerpt" }, f.excerpt || ""))));
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function axes(chart, max) {
  chart.append(svg("line", { x1: 30, y1: 130, x2: 415, y2: 130, stroke: "#99a" }));
  chart.append(svg("text", { x: 26, y: 14, "text-anchor": "end" }, String(max)));
  chart.append(svg("text", { x: 26, y: 130, "text-anchor": "end" }, "0"));
}

function renderAttemptsChart(snap) {
  const chart = document.getElementById("chart-attempts");
  chart.replaceChildren();
  const minutes = snap.attempts_per_minute || [];
  const now = Math.floor(snap.now_ms / 60000);
  const span = 15;
  const counts = new Map(minutes.map((m) => [Math.floor(m.minute_ms / 60000), m.counts]));
  let max = 1;
  for (const m of minutes) max = Math.max(max, Object.values(m.counts).reduce((a, b) => a + b, 0));
  axes(chart, max);
  const width = 385 / span;
  const classes = new Set();
  for (let i = 0; i < span; i++) {
    const minute = now - span + 1 + i;
    let y = 130;
    for (const [cls, n] of Object.entries(counts.get(minute) || {})) {
      classes.add(cls);
      const h = (n / max) * 116;
      y -= h;
      chart.append(svg("rect", {
        x: 30 + i * width + 1, y, width: width - 2, height: h,
        fill: CLASS_COLOURS[cls] || "#455a64", "data-class": cls, "data-count": n,
      }));
    }
  }
  chart.append(svg("text", { x: 30, y: 145 }, `${span} min ago`));
  chart.append(svg("text", { x: 415, y: 145, "text-anchor": "end" }, "now"));
  let x = 30;
  for (const cls of classes) {
    chart.append(svg("rect", { x, y: 150, width: 8, height: 8, fill: CLASS_COLOURS[cls] || "#455a64" }));
    chart.append(svg("text", { x: x + 11, y: 158 }, cls));
    x += 14 + cls.length * 6;
  }
}

function renderWaitsChart(snap) {
  const chart = document.getElementById("chart-waits");
  chart.replaceChildren();
  const bounds = snap.wait_buckets_ms || [];
  const counts = snap.wait_counts || [];
  const max = Math.max(1, ...counts);
  axes(chart, max);
  const width = 385 / counts.length;
  const label = (ms) => (ms < 1000 ? `${ms}ms` : `${ms / 1000}s`);
  counts.forEach((n, i) => {
    const h = (n / max) * 116;
    chart.append(svg("rect", {
      x: 30 + i * width + 2, y: 130 - h, width: width - 4, height: h, fill: "#b26a00", "data-count": n,
    }));
    const name = i < bounds.length ? `≤${label(bounds[i])}` : `>${label(bounds[bounds.length - 1])}`;
    chart.append(svg("text", { x: 30 + i * width + width / 2, y: 145, "text-anchor": "middle" }, name));
  });
}

function render(snap) {
  latest = snap;
  skew = snap.now_ms - Date.now();
  renderCandidates(snap);
  renderWaiting(snap);
  renderJobs(snap);
  renderFailures(snap);
  renderAttemptsChart(snap);
  renderWaitsChart(snap);
  tick();
}

// Between snapshots, every countdown moves with this browser's clock.
function tick() {
  document.getElementById("clock").textContent = latest ? clock(serverNow()) : "";
  for (const cell of document.querySelectorAll("td.left[data-until]")) {
    const until = cell.getAttribute("data-until");
    if (until) cell.textContent = left(Number(until));
  }
}

function connect() {
  const status = document.getElementById("connection");
  const source = new EventSource("/v1/rebound/status/events");
  source.addEventListener("open", () => { status.textContent = "live"; status.classList.add("live"); });
  source.addEventListener("snapshot", (event) => render(JSON.parse(event.data)));
  source.addEventListener("error", () => {
    status.textContent = "disconnected; reconnecting…";
    status.classList.remove("live");
  });
}

document.addEventListener("DOMContentLoaded", () => {
  connect();
  setInterval(tick, 250);
});
