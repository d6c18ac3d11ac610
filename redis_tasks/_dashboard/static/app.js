// The dashboard page: polls /api/state and redraws. Everything from the server is
// written with textContent (never as HTML), so no name in it can become markup.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const W = 600, H = 180, PAD = 28;
let points = [];
let lastAt = null;
let interval = 2000;

function duration(ms) {
  if (ms === null || ms === undefined) return "-";
  const sign = ms < 0 ? "-" : "";
  ms = Math.abs(ms);
  if (ms < 1000) return sign + ms.toFixed(ms < 10 ? 1 : 0) + " ms";
  if (ms < 60000) return sign + (ms / 1000).toFixed(1) + " s";
  if (ms < 3600000) return sign + Math.round(ms / 60000) + " min";
  return sign + (ms / 3600000).toFixed(1) + " h";
}

function number(n) {
  if (n === null || n === undefined) return "-";
  return n.toLocaleString("en-US", { maximumFractionDigits: Math.abs(n) >= 100 ? 0 : 1 });
}

function set(id, text) {
  document.getElementById(id).textContent = text;
}

function rows(tableId, data, cells) {
  const body = document.querySelector("#" + tableId + " tbody");
  body.replaceChildren();
  for (const item of data) {
    const tr = document.createElement("tr");
    for (const [text, cls] of cells(item)) {
      const td = document.createElement("td");
      td.textContent = text;
      if (cls) td.className = cls;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

function chart(id, series) {
  const svg = document.getElementById(id);
  svg.replaceChildren();
  const shown = points.slice(-150);
  let top = 0;
  for (const [key] of series) {
    for (const p of shown) if (p[key] !== null && p[key] > top) top = p[key];
  }
  top = top > 0 ? top * 1.1 : 1;
  for (const frac of [0, 0.5, 1]) {
    const y = H - PAD + frac * (PAD * 2 - H);
    const line = document.createElementNS(SVG, "line");
    line.setAttribute("class", "grid");
    line.setAttribute("x1", PAD); line.setAttribute("x2", W);
    line.setAttribute("y1", y); line.setAttribute("y2", y);
    svg.appendChild(line);
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("class", "axis");
    label.setAttribute("x", 2); label.setAttribute("y", y + 4);
    label.textContent = number(top * frac);
    svg.appendChild(label);
  }
  if (shown.length < 2) return;
  const step = (W - PAD) / (shown.length - 1);
  for (const [key, cls] of series) {
    const coords = [];
    shown.forEach((p, i) => {
      if (p[key] === null) return;
      const x = PAD + i * step;
      const y = H - PAD - (p[key] / top) * (H - PAD * 2);
      coords.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    if (coords.length < 2) continue;
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", cls);
    line.setAttribute("points", coords.join(" "));
    svg.appendChild(line);
  }
}

function render(state) {
  interval = Math.max(250, state.interval_s * 1000);
  const status = document.getElementById("status");
  if (state.failing_since !== null) {
    status.textContent = "Redis unavailable since " + new Date(state.failing_since * 1000).toLocaleTimeString();
    status.className = "status failing";
  }
  const ins = state.inspection;
  if (!ins) return;
  set("scope", "prefix " + state.prefix + " \u00b7 " + ins.partitions.length + " partitions \u00b7 "
    + (ins.cluster ? "cluster" : "standalone"));
  if (state.failing_since === null) {
    status.textContent = "updated " + new Date().toLocaleTimeString() + " \u00b7 reading " + state.readings;
    status.className = "status";
  }
  set("backlog", number(ins.backlog));
  set("pending", number(ins.pending));
  set("oldest-waiting", duration(ins.oldest_waiting_ms));
  set("working", number(ins.statuses.working));
  set("input-required", number(ins.statuses.input_required));
  set("completed", number(ins.statuses.completed));
  set("failed", number(ins.statuses.failed));
  set("cancelled", number(ins.statuses.cancelled));
  set("created", number(ins.created));
  const last = points.length ? points[points.length - 1] : null;
  set("created-rate", last ? number(last.created_per_s) : "-");
  set("ended-rate", last ? number(last.ended_per_s) : "-");
  set("pickup", last ? duration(last.pickup_p50_ms) + " / " + duration(last.pickup_p99_ms) : "-");
  rows("partitions", ins.partitions, (p) => [
    [String(p.partition)], [p.node], [number(p.entries)], [number(p.backlog)], [number(p.pending)],
    [number(p.tenants.queued)], [number(p.tenants.waiting)], [duration(p.oldest_waiting_ms)],
    [number(p.created)], [number(Object.values(p.ended).reduce((a, b) => a + b, 0))],
    [duration(p.pickup.p50_ms)],
  ]);
  rows("consumers", ins.consumers.slice(0, 20), (c) => [[c.name, "id"], [number(c.pending)], [duration(c.idle_ms)]]);
  const leases = ins.partitions.flatMap((p) => p.leases)
    .filter((l) => l.remaining_ms !== null)
    .sort((a, b) => a.remaining_ms - b.remaining_ms).slice(0, 10);
  rows("leases", leases, (l) => [[l.task, "id"], [l.status || "expired"], [l.lease_owner || "-"],
    [String(l.attempt)], [duration(l.remaining_ms)]]);
  const tenants = ins.tenants;
  set("tenants-waiting", number(tenants.waiting));
  set("queued", number(tenants.queued));
  set("tenants-parked", number(tenants.parked));
  set("waiting-for-input", number(tenants.waiting_for_input));
  set("deferred", number(tenants.deferred));
  set("refused-quota", number(tenants.refused.quota));
  set("refused-rate", number(tenants.refused.rate));
  set("tenants-scope", "(" + number(tenants.distinct) + " distinct; waiting counts each partition"
    + (tenants.sampled ? "; sampled)" : ")"));
  rows("tenants-backlog", tenants.by_backlog, (t) => [[t.tenant, "id"], [number(t.backlog)],
    [number(t.running)], [duration(t.oldest_waiting_ms)], [t.parked ? "yes" : "-"]]);
  rows("tenants-running", tenants.by_running, (t) => [[t.tenant, "id"], [number(t.running)],
    [number(t.backlog)]]);
  const report = state.tenants;
  if (report) {
    rows("tenants-open", report.top.open, (t) => [[t.tenant, "id"], [number(t.open)],
      [number(t.running)], [number(t.queued)], [number(t.refused.quota + t.refused.rate)],
      [plan(t.plan)]]);
    rows("tenants-refused", report.top.refused, (t) => [[t.tenant, "id"],
      [number(t.refused.quota)], [number(t.refused.rate)], [number(t.open)], [plan(t.plan)]]);
  }
  chart("chart-throughput", [["created_per_s", "created"], ["ended_per_s", "ended"]]);
  chart("chart-backlog", [["backlog", "backlog"], ["pending", "pending"]]);
  chart("chart-pickup", [["pickup_p50_ms", "p50"], ["pickup_p99_ms", "p99"]]);
}

// A tenant's plan in a few words, as redis-tasks tenants prints it ("-": none kept).
function plan(p) {
  if (!p) return "-";
  const terms = ["w" + p.weight];
  if (p.max_open_tasks) terms.push("open<=" + p.max_open_tasks);
  if (p.max_running_tasks) terms.push("run<=" + p.max_running_tasks);
  if (p.create_rate) terms.push(p.create_rate + "/s burst " + p.create_burst);
  return (p.name ? p.name + ": " : "") + terms.join(" ");
}

async function poll() {
  try {
    const url = lastAt === null ? "/api/state" : "/api/state?since=" + lastAt;
    const reply = await fetch(url, { cache: "no-store" });
    if (reply.ok) {
      const state = await reply.json();
      for (const p of state.points) points.push(p);
      points = points.slice(-300);
      if (points.length) lastAt = points[points.length - 1].at_ms;
      render(state);
    }
  } catch (err) {
    const status = document.getElementById("status");
    status.textContent = "dashboard unreachable";
    status.className = "status failing";
  }
  setTimeout(poll, interval);
}

poll();
