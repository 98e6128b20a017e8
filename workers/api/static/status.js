// The mvs status page: polls GET overview (the REST API's JSON, see /docs) and redraws in place.
// Polling, not server-sent events: every update is a fresh read of the control plane that the server
// makes on request anyway (it holds no consumer to push from), the data stays one documented JSON
// endpoint, and the page resumes by itself after a server restart or a broker outage. The next poll
// starts only when the last one has ended, so a slow broker never stacks requests.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
const STATUSES = ["fresh", "late", "stale", "error", "paused", "unknown"];
const NODE = { width: 190, height: 46, column: 250, gap: 18, margin: 12 };

let polls = 0;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) node.append(child instanceof Node ? child : String(child));
  return node;
}

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  const s = ms / 1000;
  if (s < 10) return `${s.toFixed(1)}s`;
  if (s < 120) return `${Math.round(s)}s`;
  if (s < 7200) return `${Math.round(s / 60)}min`;
  return `${(s / 3600).toFixed(1)}h`;
}

// Times relative to the server's clock (generated_at_ms), so a skewed browser clock does not matter.
function ago(ms, now) {
  return ms ? `${duration(Math.max(0, now - ms))} ago` : "–";
}

function until(ms, now) {
  return ms ? (ms <= now ? "due" : `in ${duration(ms - now)}`) : "–";
}

function trigger(t) {
  if (!t) return "–";
  const words = { EVERY: "every", TARGET_LAG: "target lag", ON_CHANGE: "on change", ON_DEMAND: "on demand", DOWNSTREAM: "target lag downstream" };
  const kind = words[t.kind] || t.kind;
  return t.interval_ms ? `${kind} ${duration(t.interval_ms)}` : kind;
}

function watermark(w) {
  const parts = Object.keys(w).sort().map((table) => `${table}@v${w[table]}`);
  return parts.length ? parts.join(" ") : "–";
}

function badge(text, kind, value) {
  return el("span", { class: "badge", [`data-${kind}`]: value }, text);
}

function replaceRows(table, rows, empty) {
  const body = document.querySelector(`#${table} tbody`);
  const columns = document.querySelectorAll(`#${table} thead th`).length;
  body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: columns, class: "muted" }, empty))]));
}

function renderRoles(roles) {
  const shown = roles.map((r) => {
    const lag = r.ddl_lag === null || r.ddl_lag === undefined ? "" : `, DDL lag ${r.ddl_lag}`;
    const detail = r.role === "worker" ? `${r.tasks ?? 0} task(s)` : `${r.state}${lag}`;
    return el("span", { class: "role", "data-role": r.role, title: r.last_loop_error || "" }, `${r.role} ${r.name}: ${detail}`);
  });
  document.getElementById("roles").replaceChildren(...(shown.length ? shown : [el("span", { class: "muted" }, "no live roles")]));
}

function rowY(row) {
  return NODE.margin + row * (NODE.height + NODE.gap);
}

// Right side of the source, through its own row in each column it passes (a straight run where a
// node would be), to the left side of the target; S-curves between columns.
function edgePath(from, to, viaRows) {
  const mid = NODE.height / 2;
  let x = from.x + NODE.width, y = from.y + mid;
  let d = `M${x},${y}`;
  const curveTo = (x2, y2) => {
    const bend = Math.max(20, (x2 - x) / 2);
    d += ` C${x + bend},${y} ${x2 - bend},${y2} ${x2},${y2}`;
    x = x2; y = y2;
  };
  viaRows.forEach((row, i) => {
    const left = from.x + (i + 1) * NODE.column;
    curveTo(left, rowY(row) + mid);
    d += ` L${left + NODE.width},${y}`;
    x = left + NODE.width;
  });
  curveTo(to.x, to.y + mid);
  return d;
}

function renderGraph(graph, freshness) {
  const byTask = new Map(freshness.map((f) => [f.task_id, f]));
  const place = new Map();
  let columns = 0;
  let rows = 0;
  for (const node of graph.nodes) {
    const x = NODE.margin + node.depth * NODE.column;
    const y = rowY(node.row);
    place.set(node.name, { x, y });
    columns = Math.max(columns, node.depth + 1);
    rows = Math.max(rows, node.row + 1);
  }
  for (const edge of graph.edges) rows = Math.max(rows, ...edge.via_rows.map((row) => row + 1));
  const box = document.getElementById("graph");
  const width = NODE.margin * 2 + (columns - 1) * NODE.column + NODE.width;
  const height = NODE.margin * 2 + rows * NODE.height + Math.max(0, rows - 1) * NODE.gap;
  box.setAttribute("width", graph.nodes.length ? width : 0);
  box.setAttribute("height", graph.nodes.length ? height : 0);
  const arrow = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto" },
    svg("path", { d: "M0,0 L10,5 L0,10 z", fill: "#9aa5b1" }));
  const parts = [svg("defs", {}, arrow)];
  for (const edge of graph.edges) {
    const from = place.get(edge.source);
    const to = place.get(edge.target);
    if (!from || !to) continue;
    const behind = edge.behind_versions;
    const lagText = behind === null || behind === undefined
      ? `${edge.target} reads ${edge.source}`
      : `${edge.target} is ${behind} version${behind === 1 ? "" : "s"} of ${edge.source} behind`;
    parts.push(svg("path", { class: behind ? "edge behind" : "edge", d: edgePath(from, to, edge.via_rows), "marker-end": "url(#arrow)",
      "data-edge": `${edge.source}->${edge.target}`, "data-behind": behind ?? "" }, svg("title", {}, lagText)));
  }
  for (const node of graph.nodes) {
    const { x, y } = place.get(node.name);
    const fresh = node.task_id ? byTask.get(node.task_id) : null;
    const status = fresh ? fresh.status : (node.kind === "mv" ? "unknown" : "table");
    const sub = node.kind === "mv"
      ? `${status}${fresh && fresh.lag_ms ? ` · ${duration(fresh.lag_ms)} behind` : ""}`
      : `table${node.version !== null ? ` v${node.version}` : ""}${node.mv_log ? " · MV log" : ""}`;
    const title = svg("title", {}, fresh ? fresh.reason : `base table ${node.name}`);
    parts.push(svg("g", { class: `node ${node.kind}`, "data-node": node.name, "data-status": status, transform: `translate(${x},${y})` },
      title,
      svg("rect", { class: "box", width: NODE.width, height: NODE.height, rx: 7 }),
      svg("text", { x: 10, y: 19 }, node.name),
      svg("text", { x: 10, y: 36, class: "sub" }, sub)));
  }
  box.replaceChildren(...parts);
  document.getElementById("graph-empty").hidden = graph.nodes.length > 0;
}

function lag(freshness, versions) {
  if (!freshness || freshness.lag_ms === 0) return freshness ? "current" : "–";
  const behind = versions ? `${versions} version${versions === 1 ? "" : "s"}` : "behind";
  return freshness.lag_ms === null ? `${behind}, since ?` : `${behind} · ${duration(freshness.lag_ms)}`;
}

function lastRun(run, now) {
  if (!run) return el("span", { class: "muted" }, "never");
  return el("div", {},
    badge(run.state, "state", run.state), " ", el("span", { class: "muted" }, ago(run.ended_at_ms || run.started_at_ms, now)),
    run.message ? el("div", { class: "message muted" }, run.message) : null);
}

function renderViews(tasks, freshness, now) {
  const byTask = new Map(freshness.map((f) => [f.task_id, f]));
  const rows = tasks.filter((t) => t.kind === "MV").map((t) => {
    const f = byTask.get(t.task_id);
    const status = f ? f.status : "unknown";
    return el("tr", { "data-task-id": t.task_id, "data-freshness": status, "data-lag-versions": t.lag_versions,
      "data-last-run": t.last_run ? t.last_run.state : null },
      el("td", { class: "nowrap" }, el("strong", {}, t.name)),
      el("td", { title: f ? f.reason : "" }, badge(status, "status", status)),
      el("td", { class: "nowrap", title: f ? f.reason : "" }, lag(f, t.lag_versions),
        el("div", { class: "muted" }, f && f.goal_ms ? `goal ${duration(f.goal_ms)}` : "no goal: on demand")),
      el("td", {}, badge(t.state, "state", t.state), t.error ? el("div", { class: "message" }, `${t.error.code}: ${t.error.message}`) : null),
      el("td", { class: "nowrap" }, t.driven_by ? `${trigger(t.trigger)} (${trigger(t.driven_by)})` : trigger(t.trigger)),
      el("td", {}, t.refresh_mode || "–"),
      el("td", { class: "nowrap" }, t.owner || "–"),
      el("td", { class: "mono" }, watermark(t.watermark)),
      el("td", { class: "message" }, lastRun(t.last_run, now)),
      el("td", { class: "nowrap" }, until(t.next_run_at_ms, now)));
  });
  replaceRows("mvs", rows, "No materialized views.");
}

function renderRuns(runs, now) {
  const rows = runs.map((r) => el("tr", { "data-run-id": r.run_id, "data-task-id": r.task_id, "data-state": r.state },
    el("td", { class: "nowrap", title: r.started_at }, ago(r.started_at_ms, now)),
    el("td", { class: "nowrap" }, r.task_id),
    el("td", {}, r.trigger),
    el("td", {}, badge(r.state, "state", r.state)),
    el("td", { class: "num" }, duration(r.duration_ms)),
    el("td", { class: "num" }, r.rows_written ?? "–"),
    el("td", { class: "message" }, r.error ? `${r.error.code}: ${r.error.message}` : (r.message || ""))));
  replaceRows("runs", rows, "No runs yet.");
}

function renderLogs(tasks, now) {
  const rows = tasks.filter((t) => t.kind === "MV_LOG").map((t) => el("tr", { "data-task-id": t.task_id },
    el("td", {}, el("strong", {}, t.name)),
    el("td", {}, badge(t.state, "state", t.state)),
    el("td", {}, duration(t.purge_interval_ms)),
    el("td", {}, t.owner || "–"),
    el("td", { class: "message" }, lastRun(t.last_run, now))));
  replaceRows("mvlogs", rows, "No MV logs.");
}

function render(overview) {
  const now = overview.generated_at_ms;
  document.getElementById("namespace").textContent = `· ${overview.namespace}`;
  renderRoles(overview.roles);
  renderGraph(overview.graph, overview.freshness);
  renderViews(overview.tasks, overview.freshness, now);
  renderRuns(overview.runs, now);
  renderLogs(overview.tasks, now);
  document.getElementById("notes").replaceChildren(...overview.notes.map((n) => el("li", {}, n)));
}

function setLive(state, text) {
  document.getElementById("live").dataset.state = state;
  document.getElementById("updated").textContent = text;
  document.body.classList.toggle("failing", state === "failing");
  document.body.dataset.polls = String(polls);
}

async function poll() {
  try {
    const response = await fetch("overview", { cache: "no-store", headers: { Accept: "application/json" } });
    const body = await response.json();
    if (!response.ok) throw new Error(body.message || `HTTP ${response.status}`);
    render(body);
    polls += 1;
    document.getElementById("problem").hidden = true;
    setLive("ok", `updated ${new Date(body.generated_at_ms).toLocaleTimeString()} · every ${POLL_MS / 1000}s`);
  } catch (error) {
    const problem = document.getElementById("problem");
    problem.textContent = `Cannot read the control plane: ${error.message}. Retrying every ${POLL_MS / 1000}s.`;
    problem.hidden = false;
    setLive("failing", "not updating");
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

document.getElementById("legend").replaceChildren(...STATUSES.map((s) => badge(s, "status", s)));
poll();
