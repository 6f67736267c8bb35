// gpufleet dashboard: every page is drawn from the JSON API (/api/openapi.json). Rules kept throughout:
// - data is only ever written as text (textContent, setAttribute, SVG <title>): never parsed as HTML, so a name
//   holding "<script>" shows as those characters;
// - each page's state is in its URL (path and query), so every view has a stable address;
// - a live source pushes its version over server-sent events; the page then fetches its data again and redraws
//   in place, without a reload.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";
const state = { version: 0, overview: null, page: null, queues: [] };

// ---- DOM helpers -------------------------------------------------------------------------------------------

function put(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const h = (tag, attrs, ...children) => put(document.createElement(tag), attrs, children);
const s = (tag, attrs, ...children) => put(document.createElementNS(SVGNS, tag), attrs, children);

function link(path, params, ...children) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  const qs = q.toString();
  return h("a", { href: path + (qs ? "?" + qs : "") }, ...children);
}

function workloadPath(key) {
  const [ns, name] = key.split("/");
  return "/workloads/" + encodeURIComponent(ns) + "/" + encodeURIComponent(name);
}

async function api(path) {
  const res = await fetch(path, { headers: { Accept: "application/json" } });
  const doc = await res.json();
  if (!res.ok) throw new Error(doc.message || res.statusText);
  return doc;
}

function query() { return new URLSearchParams(location.search); }

function setQuery(name, value) {
  const q = query();
  if (value === null || value === "" || value === undefined) q.delete(name); else q.set(name, value);
  if (name !== "offset") q.delete("offset");
  history.replaceState(null, "", location.pathname + (q.toString() ? "?" + q : ""));
  refresh();
}

const fmt = (x, d = 1) => (x === null || x === undefined) ? "n/a" :
  (typeof x === "number" ? (Number.isInteger(x) ? x.toLocaleString("en") : x.toLocaleString("en", { maximumFractionDigits: d })) : String(x));

function duration(sec) {
  if (sec === null || sec === undefined) return "n/a";
  if (sec < 90) return Math.round(sec) + " s";
  if (sec < 5400) return Math.round(sec / 60) + " min";
  if (sec < 172800) return (sec / 3600).toFixed(1) + " h";
  return (sec / 86400).toFixed(1) + " d";
}

// Queues get distinct colours: the palette in the order of the ClusterQueues' names (the fleet API lists them),
// a hue from the name's hash beyond it.
const PALETTE = ["#1c7ed6", "#e8590c", "#2f9e44", "#9c36b5", "#f59f00", "#0ca678", "#d6336c", "#5c7cfa", "#845ef7", "#74b816"];
function queueColour(name) {
  if (!name) return "#868e96";
  const i = (state.queues || []).indexOf(name);
  if (i >= 0 && i < PALETTE.length) return PALETTE[i];
  let hash = 0;
  for (const ch of name) hash = (hash * 31 + ch.codePointAt(0)) >>> 0;
  return `hsl(${hash % 360}, 62%, 46%)`;
}

// ---- tooltip ------------------------------------------------------------------------------------------------

const tip = () => document.getElementById("tip");
function showTip(ev, text) {
  const t = tip();
  t.textContent = text;
  t.hidden = false;
  t.style.left = Math.min(ev.clientX + 12, window.innerWidth - 300) + "px";
  t.style.top = (ev.clientY + 14) + "px";
}
function hideTip() { tip().hidden = true; }
function hover(el, text) {
  el.addEventListener("mousemove", (ev) => showTip(ev, text));
  el.addEventListener("mouseleave", hideTip);
  return el;
}

// ---- the frame: source, notes, navigation, live updates --------------------------------------------------

function pageOf(path) {
  if (path.startsWith("/workloads/")) return "workload";
  return { "/fleet": "fleet", "/queues": "queues", "/workloads": "workloads", "/whatif": "whatif" }[path] || "fleet";
}

function drawFrame(ov) {
  document.getElementById("source").textContent = `${ov.source}: ${ov.title}`;
  document.title = `gpufleet · ${ov.title}`;
  for (const a of document.querySelectorAll("#nav a")) {
    const p = a.dataset.page;
    a.classList.toggle("current", p === state.page || (p === "workloads" && state.page === "workload"));
    a.classList.toggle("unavailable", !ov.pages.includes(p));
  }
  const notes = document.getElementById("notes");
  notes.replaceChildren();
  notes.hidden = !ov.notes.length;
  if (ov.notes.length) notes.appendChild(h("ul", {}, ov.notes.map((n) => h("li", {}, n))));
}

function markUpdated(version) {
  const u = document.getElementById("updated");
  u.dataset.version = String(version);
  u.textContent = `version ${version}, ${new Date().toLocaleTimeString("en-GB")}`;
  u.classList.add("flash");
  setTimeout(() => u.classList.remove("flash"), 600);
}

async function refresh() {
  const main = document.getElementById("main");
  try {
    const ov = await api("/api/overview");
    state.overview = ov;
    drawFrame(ov);
    const draw = { fleet: drawFleet, queues: drawQueues, workloads: drawWorkloads, workload: drawWorkload,
                   whatif: drawWhatIf }[state.page];
    const page = state.page === "workload" ? "workloads" : state.page;
    if (!ov.pages.includes(page)) {
      main.replaceChildren(h("h1", {}, "Not shown for this source"),
        h("p", {}, `This dashboard shows a ${ov.source} source, which has no ${page} page. `,
          ov.pages.length ? link("/" + ov.pages[0], null, "Go to " + ov.pages[0]) : ""));
      return;
    }
    const content = await draw();
    main.replaceChildren(content);
    state.version = ov.version;
    markUpdated(ov.version);
  } catch (err) {
    main.replaceChildren(h("p", { class: "error" }, "Could not load this page: " + err.message));
  }
}

function listen() {
  // Files and simulation results never change: only a live source keeps a stream open.
  if (!window.EventSource || !state.overview || state.overview.source !== "live") return;
  const events = new EventSource("/api/events");
  events.addEventListener("version", (ev) => {
    const v = JSON.parse(ev.data).version;
    document.getElementById("updated").classList.toggle("live", state.overview && state.overview.source === "live");
    if (v !== state.version && state.overview) refresh();
  });
}

// ---- Fleet --------------------------------------------------------------------------------------------------

const GPU_W = 100, GPU_H = 34;

function sliceText(sl, gpu, node) {
  const where = `${node.name} GPU ${gpu.index} (${gpu.model}${gpu.healthy ? "" : ", UNHEALTHY"})`;
  const what = sl.kind === "mig" ? `MIG ${sl.profile} at memory slice ${sl.start}` :
    sl.kind === "replica" ? `time-slice replica ${sl.start + 1} of ${gpu.units}` :
    sl.kind === "fraction" ? `fraction ${(sl.size / 10).toFixed(1)}% of the GPU` + (sl.memoryMiB ? `, ${sl.memoryMiB} MiB` : "") :
    "whole GPU";
  const who = sl.holder ? `held by ${sl.holder}\nworkload ${sl.workload || "(none)"}\nClusterQueue ${sl.queue || "(none)"}\n${sl.state}` : "free";
  return `${where}\n${what}\n${who}\ndevice ${sl.id}`;
}

function drawGpu(gpu, node) {
  const cls = ["gpu"];
  if (!gpu.healthy) cls.push("unhealthy");
  if (gpu.idle) cls.push("idle");
  const svg = s("svg", { class: cls.join(" "), width: GPU_W, height: GPU_H, viewBox: `0 0 ${GPU_W} ${GPU_H}`,
    "data-gpu": gpu.id, "data-mode": gpu.mode, "data-node": node.name, "data-index": gpu.index,
    "aria-label": `GPU ${gpu.index} of ${node.name}` });
  svg.appendChild(s("rect", { class: "box", x: 0.5, y: 0.5, width: GPU_W - 1, height: GPU_H - 1, rx: 3 }));
  const units = Math.max(gpu.units, 1);
  const inner = GPU_W - 4;
  for (const sl of gpu.slices) {
    const x = 2 + inner * sl.start / units;
    const w = Math.max(inner * sl.size / units, 1.5);
    const r = s("rect", { class: `slice ${sl.state}`, x: x.toFixed(2), y: 2, width: w.toFixed(2), height: GPU_H - 4,
      "data-kind": sl.kind, "data-holder": sl.holder || "", "data-queue": sl.queue || "", "data-start": sl.start,
      "data-size": sl.size, "data-state": sl.state, "data-profile": sl.profile || "",
      fill: sl.holder ? queueColour(sl.queue) : null },
      s("title", {}, sliceText(sl, gpu, node)));
    svg.appendChild(hover(r, sliceText(sl, gpu, node)));
  }
  if (gpu.mode === "mig" && units > 1) {
    for (const sl of gpu.slices) if (sl.profile && sl.size / units >= 0.24)
      svg.appendChild(s("text", { x: 2 + inner * sl.start / units + 2, y: GPU_H / 2 + 3 }, sl.profile));
  }
  if (!gpu.healthy) {
    svg.appendChild(s("line", { class: "cross", x1: 2, y1: 2, x2: GPU_W - 2, y2: GPU_H - 2 }));
    svg.appendChild(s("line", { class: "cross", x1: GPU_W - 2, y1: 2, x2: 2, y2: GPU_H - 2 }));
  }
  return svg;
}

function select(name, label, values, current, labels) {
  const sel = h("select", { name, onchange: (ev) => setQuery(name, ev.target.value) },
    h("option", { value: "" }, "any"),
    values.map((v) => h("option", { value: v, selected: v === current }, (labels && labels[v]) || v)));
  return h("label", {}, label, sel);
}

function legend(queues) {
  return h("div", { class: "legend" },
    queues.map((q) => h("span", {}, h("span", { class: "swatch", style: null, "data-queue": q }), q)),
    h("span", {}, h("span", { class: "swatch free" }), "free"),
    h("span", {}, h("span", { class: "swatch planned" }), "planned (not bound yet)"),
    h("span", {}, h("span", { class: "swatch idle" }), "allocated but idle"),
    h("span", {}, h("span", { class: "swatch unhealthy" }), "unhealthy"));
}

function paintSwatches(root) {
  for (const el of root.querySelectorAll(".swatch[data-queue]")) el.style.background = queueColour(el.dataset.queue);
  for (const el of root.querySelectorAll("svg.gpu .slice[fill]")) el.style.fill = el.getAttribute("fill");
}

function pager(total, offset, limit) {
  const prev = offset > 0 ? h("a", { href: "#", onclick: (e) => { e.preventDefault(); setQuery("offset", String(Math.max(0, offset - limit))); } }, "← previous") : null;
  const next = offset + limit < total ? h("a", { href: "#", onclick: (e) => { e.preventDefault(); setQuery("offset", String(offset + limit)); } }, "next →") : null;
  const shown = total ? `${offset + 1}–${Math.min(total, offset + limit)} of ${total}` : "none";
  return h("div", { class: "pager" }, prev, h("span", { class: "muted" }, shown), next);
}

async function drawFleet() {
  const q = query();
  const params = new URLSearchParams();
  for (const k of ["node", "model", "pool", "queue", "problem", "offset"]) if (q.get(k)) params.set(k, q.get(k));
  const doc = await api("/api/fleet?" + params);
  state.queues = doc.queues;
  const pools = h("table", { id: "pools" },
    h("tr", {}, ["node pool", "models", "nodes", "GPUs", "held", "allocated but idle", "unhealthy"].map((c, i) => h("th", { class: i > 1 ? "num" : null }, c))),
    doc.pools.map((p) => h("tr", {},
      h("td", {}, link("/fleet", { pool: p.name }, p.name)), h("td", {}, p.models.join(", ")),
      h("td", { class: "num" }, fmt(p.nodes)), h("td", { class: "num" }, fmt(p.gpus)),
      h("td", { class: "num" }, fmt(p.held, 2)),
      h("td", { class: "num" }, p.idle ? h("span", { class: "badge idle" }, fmt(p.idle)) : "0"),
      h("td", { class: "num" }, p.unhealthy ? h("span", { class: "badge bad" }, fmt(p.unhealthy)) : "0"))));
  const filters = h("div", { class: "filters" },
    select("model", "GPU model", doc.models, q.get("model")),
    select("pool", "node pool", doc.pools.map((p) => p.name), q.get("pool")),
    select("queue", "ClusterQueue", doc.queues, q.get("queue")),
    select("problem", "only nodes with", ["idle", "unhealthy", "notready"], q.get("problem"),
      { idle: "allocated but idle GPUs", unhealthy: "unhealthy GPUs", notready: "not ready or cordoned" }));
  const nodes = h("div", { class: "nodes", id: "nodes" }, doc.nodes.map((n) => {
    const flags = [];
    if (!n.ready) flags.push(h("span", { class: "badge bad" }, "not ready"));
    if (n.unschedulable) flags.push(h("span", { class: "badge bad" }, "cordoned"));
    const idle = n.gpus.filter((g) => g.idle).length;
    if (idle) flags.push(h("span", { class: "badge idle" }, `${idle} idle`));
    return h("div", { class: "node" + (n.ready ? "" : " notready"), "data-node": n.name },
      h("header", {}, h("span", { class: "name" }, n.name), h("span", { class: "meta" }, `${n.pool} · ${n.model || "no GPU"} · ${n.pods} pods`), flags),
      h("div", { class: "gpus" }, n.gpus.map((g) => drawGpu(g, n))));
  }));
  const root = h("div", {}, h("h1", {}, "Fleet"), h("h2", {}, "Node pools"), pools, h("h2", {}, "Nodes"), filters,
    legend(doc.queues), pager(doc.total, doc.offset, doc.limit), nodes,
    doc.total > doc.limit ? pager(doc.total, doc.offset, doc.limit) : null);
  paintSwatches(root);
  return root;
}

// ---- Queues -------------------------------------------------------------------------------------------------

const BAR_W = 260, BAR_H = 16;

function quotaBar(quota) {
  const u = quota.units;
  const ceiling = u.borrowingLimit === null ? null : u.nominal + u.borrowingLimit;
  const top = Math.max(u.nominal, u.usage, ceiling || 0, 1) * 1.1;
  const x = (v) => (BAR_W * v / top).toFixed(2);
  const svg = s("svg", { class: "bar", width: BAR_W, height: BAR_H, "data-resource": quota.resource, "data-flavor": quota.flavor });
  svg.appendChild(s("defs", {}, s("pattern", { id: "hatch", width: 4, height: 4, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" },
    s("rect", { width: 4, height: 4, fill: "#d3f9d8" }), s("line", { x1: 0, y1: 0, x2: 0, y2: 4, stroke: "#69db7c", "stroke-width": 2 }))));
  svg.appendChild(s("rect", { class: "nominal", x: 0, y: 2, width: x(u.nominal), height: BAR_H - 4 }));
  if (u.lendingLimit !== null && u.lendingLimit < u.nominal)
    svg.appendChild(s("rect", { class: "lendable", x: x(u.nominal - u.lendingLimit), y: 2, width: x(u.lendingLimit), height: BAR_H - 4 }));
  svg.appendChild(s("rect", { class: "used", x: 0, y: 5, width: x(Math.min(u.usage, u.nominal)), height: BAR_H - 10 }));
  if (u.usage > u.nominal) svg.appendChild(s("rect", { class: "borrowed", x: x(u.nominal), y: 5, width: x(u.usage - u.nominal), height: BAR_H - 10 }));
  svg.appendChild(s("line", { class: "edge", x1: x(u.nominal), x2: x(u.nominal), y1: 0, y2: BAR_H }));
  if (ceiling !== null) svg.appendChild(s("line", { class: "limit", x1: x(ceiling), x2: x(ceiling), y1: 0, y2: BAR_H }));
  const text = `${quota.flavor} ${quota.resource}: using ${quota.usage} of nominal ${quota.nominal}` +
    (quota.borrowed !== "0" ? `, borrowing ${quota.borrowed}` : "") +
    `\nborrowing limit ${quota.borrowingLimit ?? "none (up to what the cohort lends)"}` +
    `\nlending limit ${quota.lendingLimit ?? "none (all unused quota may be lent)"}`;
  svg.appendChild(s("title", {}, text));
  return hover(svg, text);
}

function quotaTable(quotas) {
  if (!quotas.length) return h("p", { class: "muted" }, "no quota of its own");
  return h("table", { class: "quotas" },
    h("tr", {}, ["flavor", "resource", "usage against nominal", "usage", "nominal", "borrowed", "borrowing limit", "lending limit"].map((c, i) => h("th", { class: i > 2 ? "num" : null }, c))),
    quotas.map((q) => h("tr", { "data-flavor": q.flavor, "data-resource": q.resource },
      h("td", {}, q.flavor), h("td", {}, q.resource), h("td", {}, quotaBar(q)),
      h("td", { class: "num" }, q.usage), h("td", { class: "num" }, q.nominal), h("td", { class: "num" }, q.borrowed),
      h("td", { class: "num" }, q.borrowingLimit ?? "—"), h("td", { class: "num" }, q.lendingLimit ?? "—"))));
}

async function drawQueues() {
  const doc = await api("/api/queues");
  const cohorts = new Map(doc.cohorts.map((c) => [c.name, c]));
  const cqs = new Map(doc.clusterQueues.map((c) => [c.name, c]));
  const cqItem = (name) => {
    const cq = cqs.get(name);
    return h("li", { "data-cq": name }, h("a", { href: "#cq-" + encodeURIComponent(name) }, name), " ",
      h("span", { class: "muted" }, cq ? `${cq.admitted} admitted, ${cq.pending} pending, fair share ${cq.fairShare}` : ""));
  };
  const cohortItem = (c) => h("li", { "data-cohort": c.name }, h("strong", {}, "cohort " + c.name), " ",
    h("span", { class: "muted" }, `fair share ${c.fairShare}, weight ${fmt(c.fairWeight)}`),
    h("ul", {}, c.cohorts.map((n) => cohortItem(cohorts.get(n))), c.clusterQueues.map(cqItem)));
  const roots = doc.cohorts.filter((c) => !c.parent);
  const alone = doc.clusterQueues.filter((c) => !c.cohort).map((c) => c.name);
  const tree = h("div", { class: "tree", id: "tree" }, h("ul", {}, roots.map(cohortItem), alone.map(cqItem)));
  const cards = doc.clusterQueues.map((cq) => h("section", { class: "cq", id: "cq-" + cq.name, "data-cq": cq.name },
    h("h3", {}, "ClusterQueue " + cq.name, cq.stopped ? h("span", { class: "badge bad" }, " stopped") : null),
    h("p", { class: "muted" }, `cohort ${cq.cohort || "(none)"} · ${cq.strategy} · `,
      link("/workloads", { queue: cq.name, status: "admitted" }, `${cq.admitted} admitted`), " · ",
      link("/workloads", { queue: cq.name, status: "pending" }, `${cq.pending} pending`),
      ` · fair-sharing weight ${fmt(cq.fairWeight)}, weighted share ${cq.fairShare}`),
    quotaTable(cq.quotas)));
  const cohortCards = doc.cohorts.filter((c) => c.quotas.length).map((c) => h("section", { class: "cq", "data-cohort": c.name },
    h("h3", {}, "Cohort " + c.name), quotaTable(c.quotas)));
  return h("div", {}, h("h1", {}, "Queues"), h("h2", {}, "Cohort tree"), tree,
    h("p", { class: "muted" }, "Bars: green is used within nominal quota, orange is borrowed from the cohort, the hatched part of nominal is what may be lent, the red line is nominal plus the borrowing limit."),
    h("h2", {}, "ClusterQueues"), cards, cohortCards.length ? h("h2", {}, "Cohorts with quota of their own") : null, cohortCards);
}

// ---- Workloads ----------------------------------------------------------------------------------------------

async function drawWorkloads() {
  const q = query();
  const params = new URLSearchParams();
  for (const k of ["q", "status", "queue", "namespace", "offset"]) if (q.get(k)) params.set(k, q.get(k));
  const [doc, queues] = await Promise.all([api("/api/workloads?" + params), api("/api/queues")]);
  let timer = null;
  const search = h("input", { type: "search", name: "q", value: q.get("q") || "", placeholder: "name, queue, reason…",
    oninput: (ev) => { clearTimeout(timer); timer = setTimeout(() => setQuery("q", ev.target.value), 250); } });
  const filters = h("div", { class: "filters" }, h("label", {}, "search", search),
    select("status", "status", ["pending", "admitted", "deactivated", "finished"], q.get("status")),
    select("queue", "ClusterQueue", queues.clusterQueues.map((c) => c.name), q.get("queue")));
  const table = h("table", { id: "workloads" },
    h("tr", {}, ["workload", "kind", "queue", "status", "device (per pod)", "pods", "why it waits"].map((c, i) => h("th", { class: i === 5 ? "num" : null }, c))),
    doc.workloads.map((w) => h("tr", { "data-workload": w.key },
      h("td", {}, h("a", { href: workloadPath(w.key) }, w.key)), h("td", {}, w.kind),
      h("td", {}, w.clusterQueue || w.localQueue || "(none)"),
      h("td", {}, h("span", { class: "badge " + w.status }, w.status)),
      h("td", { class: "device" }, w.device || "none"), h("td", { class: "num" }, fmt(w.pods)),
      h("td", { class: "reason" }, w.reason))));
  return h("div", {}, h("h1", {}, "Workloads"), filters, pager(doc.total, doc.offset, doc.limit), table);
}

async function drawWorkload() {
  const parts = location.pathname.split("/");
  const ns = decodeURIComponent(parts[2] || ""), name = decodeURIComponent(parts[3] || "");
  const doc = await api("/api/workloads/" + encodeURIComponent(ns) + "/" + encodeURIComponent(name));
  const w = doc.workload;
  const why = w.status === "admitted" ? h("p", { id: "why" }, "Admitted" + (w.clusterQueue ? " by ClusterQueue " + w.clusterQueue : " without a queue (no quota)") + ".")
    : h("div", { id: "why" }, h("h2", {}, w.status === "pending" ? "Why it waits" : "Why it does not run"), h("p", { class: "reason", id: "reason" }, w.reason || "(no reason given)"));
  const flavors = Object.entries(w.flavors);
  const pods = h("table", { id: "pods" }, h("tr", {}, ["pod", "node", "devices", "phase", "state"].map((c) => h("th", {}, c))),
    w.pods.map((p) => h("tr", { "data-pod": p.key },
      h("td", {}, p.key), h("td", {}, p.node ? link("/fleet", { node: p.node }, p.node) : "not placed"),
      h("td", {}, p.devices.length ? p.devices.join(", ") : "—"), h("td", {}, p.phase), h("td", {}, p.node ? p.state : "—"))));
  const history = w.preemptions.length ? h("table", { id: "preemptions" },
    h("tr", {}, ["when", "preempted by", "reason"].map((c) => h("th", {}, c))),
    w.preemptions.map((p) => h("tr", {}, h("td", {}, p.when), h("td", {}, p.preemptor ? h("a", { href: workloadPath(p.preemptor) }, p.preemptor) : "—"), h("td", {}, p.reason))))
    : h("p", { class: "muted", id: "preemptions" }, "never preempted");
  return h("div", {}, h("p", {}, link("/workloads", null, "← workloads")),
    h("h1", {}, w.key, " ", h("span", { class: "badge " + w.status }, w.status)),
    h("p", { class: "muted" }, `${w.kind} · LocalQueue ${w.localQueue || "(none)"} → ClusterQueue ${w.clusterQueue || "(none)"} · priority ${w.priority} · ${w.device ? w.device + " per pod" : "no GPU"}`),
    why, flavors.length ? h("p", {}, "Flavors: " + flavors.map(([r, f]) => `${r}=${f}`).join(", ")) : null,
    h("h2", {}, "Pods and devices"), pods, h("h2", {}, "Preemption history"), history);
}

// ---- What-if ------------------------------------------------------------------------------------------------

// The KPI rows (key, name, which way is better) come from the simulation API: one list, the CLI's and the report's.

const label = (run) => `${run.scenario} (${run.policy})`;
const kpiText = (key, v) => key.endsWith("_s") ? duration(v) : fmt(v, 2);

function chart({ width = 460, height = 200, series, xs, xLabel, yLabel, yMax, cursor, xText, yText }) {
  const m = { l: 44, r: 10, t: 10, b: 30 };
  const w = width - m.l - m.r, hgt = height - m.t - m.b;
  const xmin = Math.min(...xs), xmax = Math.max(...xs, xmin + 1);
  const ymax = yMax ?? Math.max(1, ...series.flatMap((sr) => sr.values.filter((v) => v !== null)));
  const X = (x) => m.l + w * (x - xmin) / (xmax - xmin);
  const Y = (y) => m.t + hgt - hgt * y / ymax;
  const svg = s("svg", { class: "chart", width, height, viewBox: `0 0 ${width} ${height}` });
  svg.appendChild(s("line", { class: "axis", x1: m.l, x2: m.l + w, y1: m.t + hgt, y2: m.t + hgt }));
  svg.appendChild(s("line", { class: "axis", x1: m.l, x2: m.l, y1: m.t, y2: m.t + hgt }));
  for (const f of [0, 0.5, 1]) svg.appendChild(s("text", { x: 2, y: Y(ymax * f) + 3 }, (yText || fmt)(ymax * f)));
  for (const f of [0, 0.5, 1]) {
    const xv = xmin + (xmax - xmin) * f;
    svg.appendChild(s("text", { x: X(xv) - (f === 1 ? 30 : f === 0 ? 0 : 15), y: height - 16 }, (xText || fmt)(xv)));
  }
  svg.appendChild(s("text", { x: m.l + w / 2 - 30, y: height - 3 }, xLabel));
  if (yLabel) svg.appendChild(s("text", { x: m.l + 4, y: m.t + 9 }, yLabel));
  series.forEach((sr, i) => {
    let d = "", pen = false;
    sr.values.forEach((v, k) => {
      if (v === null || v === undefined) { pen = false; return; }
      d += (pen ? "L" : "M") + X(xs[k]).toFixed(1) + " " + Y(v).toFixed(1);
      pen = true;
    });
    svg.appendChild(s("path", { class: `line s${i % 2}`, d, "stroke-dasharray": sr.dashed ? "4 3" : null }, s("title", {}, sr.name)));
  });
  // Hover: the values of every series at the nearest x.
  const overlay = s("rect", { x: m.l, y: m.t, width: w, height: hgt, fill: "transparent" });
  overlay.addEventListener("mousemove", (ev) => {
    const box = svg.getBoundingClientRect();
    const xv = xmin + (xmax - xmin) * (ev.clientX - box.left - m.l) / w;
    let k = 0;
    xs.forEach((x, i) => { if (Math.abs(x - xv) < Math.abs(xs[k] - xv)) k = i; });
    showTip(ev, `${xLabel} ${(xText || fmt)(xs[k])}\n` + series.map((sr) => `${sr.name}: ${(yText || fmt)(sr.values[k])}`).join("\n"));
  });
  overlay.addEventListener("mouseleave", hideTip);
  svg.appendChild(overlay);
  if (cursor !== undefined && cursor !== null) {
    const cx = X(cursor);
    svg.appendChild(s("line", { class: "cursor", x1: cx, x2: cx, y1: m.t, y2: m.t + hgt }));
  }
  return svg;
}

function kpiTable(runs, pair, rows) {
  const [a, b] = pair ? [runs[pair[0]], runs[pair[1]]] : [runs[0], null];
  return h("table", { class: "kpi", id: "kpis" },
    h("tr", {}, h("th", {}, "KPI"), h("th", { class: "num" }, label(a)), b ? h("th", { class: "num" }, label(b)) : null, b ? h("th", { class: "num" }, "change") : null),
    rows.map(({ key, name, better }) => {
      const va = a.kpis[key], vb = b ? b.kpis[key] : null;
      let change = "", cls = null;
      if (b && typeof va === "number" && typeof vb === "number") {
        const diff = vb - va;
        change = key.endsWith("_s") ? (diff >= 0 ? "+" : "−") + duration(Math.abs(diff)) : (diff >= 0 ? "+" : "") + fmt(diff, 2);
        if (better && diff) cls = (diff * better > 0) ? "better" : "worse";
      }
      return h("tr", { "data-kpi": key }, h("td", {}, name), h("td", { class: "num" }, kpiText(key, va)),
        b ? h("td", { class: "num" }, kpiText(key, vb)) : null, b ? h("td", { class: "num " + (cls || "") }, change) : null);
    }));
}

function heat(run, k) {
  const nodes = Object.entries(run.timeline.nodes);
  if (!nodes.length) return h("p", { class: "muted" }, run.timeline.nodes_left_out ? `${run.timeline.nodes_left_out} nodes: too many to replay one by one; see the pools' series` : "no nodes");
  const pools = new Map();
  for (const [name, n] of nodes) {
    if (!pools.has(n.pool)) pools.set(n.pool, []);
    pools.get(n.pool).push([name, n]);
  }
  return h("div", {}, [...pools.entries()].map(([pool, members]) => h("div", { class: "heatpool" },
    h("span", { class: "muted" }, pool), h("div", { class: "heat" }, members.map(([name, n]) => {
      const held = n.held[k] || 0, busy = n.busy[k] || 0, cap = Math.max(n.gpus || 0, held, 1e-9);
      const idle = held - busy > 0.5;
      const light = 96 - 50 * Math.min(1, held / cap);
      const text = `${name} (${n.pool}, ${n.model || "?"}): ${held.toFixed(2)} of ${n.gpus} GPUs held, ${busy.toFixed(2)} busy` +
        (idle ? "\nallocated but idle: more GPUs held than busy" : "");
      const cell = h("div", { class: "cell" + (idle ? " idle" : ""), "data-node": name, "data-held": held.toFixed(2), title: text },
        held ? held.toFixed(1) : "");
      cell.style.background = `hsl(150, 45%, ${light}%)`;
      return hover(cell, text);
    })))));
}

// An advice (gpufleet advise's whatif.json) and a calibration's fit (simulate --calibrate --json) beside the runs.
// The API gives their words (scores, fit rows) as the command line says them; everything is written as text.

const SCORE_BETTER = { demand_cost: -1, demand_inference_cost: -1, wait_p95_s: -1, job_success_pct: 1,
  gpu_utilization_pct: 1, fragmentation_pct: -1, unallocated_gpu_pct: -1, pods_placed: 1 };

function headerRow(names, numeric) {
  return h("tr", {}, names.map((c, i) => h("th", { class: numeric && numeric.includes(i) ? "num" : null }, c)));
}

function nodesText(n) { return `${n} node${n === 1 ? "" : "s"}`; }

function poolLines(judged, pool) {
  return judged.pools.filter((p) => p.pool === pool).map((p) => `${nodesText(p.nodes.length)}: ${p.config.text}`);
}

function drawAdvice(a) {
  const scores = h("table", { class: "kpi", id: "advice-scores" }, headerRow(["figure", "given", "proposal"], [1, 2]),
    a.scores.map((sc) => {
      const better = SCORE_BETTER[sc.key];
      const diff = (typeof sc.given === "number" && typeof sc.proposal === "number") ? sc.proposal - sc.given : 0;
      const cls = better && diff ? (diff * better > 0 ? "better" : "worse") : null;
      return h("tr", { "data-score": sc.key }, h("td", {}, sc.label), h("td", { class: "num" }, sc.givenText),
        h("td", { class: "num " + (cls || "") }, sc.proposalText));
    }),
    h("tr", { "data-score": "objective" }, h("td", {}, `score on the objective ${a.objective} (lower is better)`),
      h("td", { class: "num" }, fmt(a.given.score, 3)), h("td", { class: "num" }, fmt(a.proposal.score, 3))));
  const all = [...a.given.pools, ...a.proposal.pools];
  const pools = [...new Set(all.map((p) => p.pool))];
  const poolTable = h("table", { id: "advice-pools" },
    headerRow(["pool", "GPU model", "GPUs per node", "given", "proposal"], [2]),
    pools.map((pool) => {
      const first = all.find((p) => p.pool === pool);
      const before = poolLines(a.given, pool), after = poolLines(a.proposal, pool);
      const lines = (items) => items.length ? items.map((t) => h("div", {}, t)) : "—";
      return h("tr", { "data-pool": pool, class: before.join() === after.join() ? null : "changed" },
        h("td", {}, pool), h("td", {}, first.model), h("td", { class: "num" }, fmt(first.gpusPerNode)),
        h("td", {}, lines(before)), h("td", {}, lines(after)));
    }));
  const requests = h("table", { id: "advice-requests" },
    headerRow(["class", "namespace", "LocalQueue", "asks now", "proposal", "per pod"], [5]),
    a.proposal.requests.map((r) => h("tr", { "data-class": r.class, class: r.resource === r.given ? null : "changed" },
      h("td", {}, r.class), h("td", {}, r.namespace), h("td", {}, r.queue || "(none)"), h("td", {}, r.given),
      h("td", {}, r.resource), h("td", { class: "num" }, fmt(r.count)))));
  const quotas = a.proposal.quotas.length ? h("table", { id: "advice-quotas" },
    headerRow(["ClusterQueue", "flavor", "resource", "nominal quota"], [3]),
    a.proposal.quotas.map((q) => h("tr", {}, h("td", {}, q.clusterQueue), h("td", {}, q.flavor), h("td", {}, q.resource),
      h("td", { class: "num" }, fmt(q.nominalQuota)))))
    : h("p", { class: "muted", id: "advice-quotas" }, "The ClusterQueues as written: the given configuration's quotas.");
  const fileRows = (files, useHeader) => h("table", { class: "files" }, headerRow(["file", "what it is", useHeader]),
    files.map((f) => [
      h("tr", { "data-file": f.file }, h("td", {}, h("code", {}, f.file)), h("td", {}, f.what),
        h("td", {}, f.command ? h("code", {}, f.command) : "—")),
      typeof f.text === "string" ? h("tr", { class: "filetext" }, h("td", { colspan: 3 },
        h("details", {}, h("summary", {}, "the text of " + f.file), h("pre", {}, f.text)))) : null]));
  const applied = a.files.filter((f) => f.applies), others = a.files.filter((f) => !f.applies);
  const tried = h("table", { id: "advice-tried" }, headerRow(["proposal", "score", "within guards"], [1]),
    [a.given, ...a.tried].map((j) => h("tr", {}, h("td", {}, j.name), h("td", { class: "num" }, fmt(j.score, 3)),
      h("td", {}, j.withinGuards ? "yes" : (j.whyNot || "no")))));
  return h("section", { id: "advice" },
    h("h2", {}, "The advice"),
    h("p", { id: "advice-summary" }, `Objective ${a.objective}` +
      (a.budgetPerHour !== null && a.budgetPerHour !== undefined ? `, budget ${fmt(a.budgetPerHour, 2)} CHF/h` : "") +
      (a.changed ? (a.measure ? `: the proposal below, judged on ${a.measure}, on the same arrivals as the given configuration.`
        : ": the proposal below, judged by the simulator on the same demand as the given configuration.")
        : ": keep the given configuration; no proposal did better within its guards.") + ` Input: ${a.input}.`),
    h("h3", {}, "Scores, given beside proposal"), scores,
    h("h3", {}, "Why"), h("ul", { class: "reasons", id: "advice-reasons" }, a.reasons.map((r) => h("li", {}, r))),
    h("h3", {}, "The proposal per pool: MIG layout, time-slice replicas or whole GPUs"), poolTable,
    h("h3", {}, "What each class asks for"), requests,
    h("h3", {}, "GPU quotas"), quotas,
    h("h3", {}, "The files to apply"),
    h("p", {}, a.changed ? "Applied in this order, they make the cluster what the proposal says:"
      : "They describe the given configuration: applying them changes nothing."),
    h("div", { id: "advice-files" }, fileRows(applied, "apply with")),
    others.length ? [h("p", {}, "Also written:"), h("div", { id: "advice-other-files" }, fileRows(others, "use"))] : null,
    a.notes.length ? [h("h3", {}, "Notes"), h("ul", { class: "reasons", id: "advice-notes" }, a.notes.map((n) => h("li", {}, n)))] : null,
    h("h3", {}, "Every proposal the simulator judged"), tried);
}

function drawCalibration(c) {
  const targets = h("table", { class: "kpi", id: "calibration-targets" },
    headerRow(["target", "observed (the target)", "simulated (the fitted run)", "residual", "tolerance", "met"], [1, 2, 3, 4]),
    c.targets.map((t) => h("tr", { "data-target": t.name }, h("td", {}, t.label), h("td", { class: "num" }, t.text.target),
      h("td", { class: "num" }, t.text.simulated), h("td", { class: "num" }, t.text.residual),
      h("td", { class: "num" }, t.text.tolerance), h("td", { class: t.met ? "better" : "worse" }, t.met ? "yes" : "no"))));
  const unknowns = h("table", { id: "calibration-unknowns" }, headerRow(["unknown", "value", "bounds", ""], [1]),
    c.unknowns.map((u) => h("tr", { "data-unknown": u.name }, h("td", {}, u.label), h("td", { class: "num" }, u.text.value),
      h("td", {}, u.text.bounds), h("td", {}, u.fitted ? "fitted" : "as written"))));
  return h("section", { id: "calibration" },
    h("h2", {}, "Calibration"),
    h("p", { id: "calibration-summary" }, `The workload's unknowns were fitted so that the observed run (${c.observed}) shows what ` +
      `the team observed${c.withinTolerance ? ", every target within its tolerance" : ", NOT within tolerance"}; every run on ` +
      `this page uses the calibrated workload (${fmt(c.evaluations)} simulations, ${duration(c.wallSeconds)}).`),
    h("h3", {}, "The targets against the fitted run"), targets,
    h("h3", {}, "The fitted unknowns"), unknowns,
    h("p", { class: "muted" }, "Load scale multiplies every class's arrival rate; busy scale every class's busy share (at " +
      "most a whole GPU); gang share, rendezvous timeout and memory scale are the scheduler-attributable mechanisms, fitted " +
      "first; the failure rate is the chance that an attempt fails on its own, whatever the scheduler does, fitted only " +
      "for what they leave."));
}

async function drawWhatIf() {
  const doc = await api("/api/simulation");
  const runs = doc.runs;
  const shown = doc.pair ? doc.pair.map((i) => runs[i]) : [runs[0]];
  const t = shown[0].timeline.t;
  const days = t.map((x) => x / 86400);
  const q = query();
  let at = Math.min(Math.max(parseInt(q.get("t") || String(t.length - 1), 10) || 0, 0), t.length - 1);

  const replay = h("div", { class: "runs", id: "replay" });
  const clock = h("span", { id: "clock" });
  const timeCharts = h("div", { class: "charts", id: "timecharts" });
  const drawAt = () => {
    clock.textContent = `day ${(t[at] / 86400).toFixed(2)} (${duration(t[at])} into the run)`;
    replay.replaceChildren(...shown.map((run) => h("div", { class: "run", "data-run": label(run) },
      h("h3", {}, label(run)),
      h("p", {}, `${run.timeline.jobs_waiting[at]} jobs waiting · ${run.timeline.jobs_running[at]} running · fragmentation ${fmt(run.timeline.fragmentation_pct[at], 1)}%`),
      heat(run, at))));
    const pools = [...new Set(shown.flatMap((r) => Object.keys(r.series)))].sort();
    timeCharts.replaceChildren(
      h("figure", {}, h("figcaption", {}, "stranded capacity % (idle GPUs a pending pod could use, where none fits)"),
        chart({ series: shown.map((r) => ({ name: label(r), values: r.timeline.fragmentation_pct })), xs: days, xLabel: "day", cursor: days[at], yText: (v) => fmt(v, 1) })),
      h("figure", {}, h("figcaption", {}, "jobs waiting"),
        chart({ series: shown.map((r) => ({ name: label(r), values: r.timeline.jobs_waiting })), xs: days, xLabel: "day", cursor: days[at] })),
      ...pools.map((p) => h("figure", {}, h("figcaption", {}, `pool ${p}: GPUs allocated (solid) and busy (dashed), %`),
        chart({ series: shown.flatMap((r) => r.series[p] ? [{ name: label(r) + " allocated", values: r.series[p].allocation_pct },
          { name: label(r) + " busy", values: r.series[p].utilization_pct, dashed: true }] : []),
          xs: days, xLabel: "day", yMax: 100, cursor: days[at], yText: (v) => fmt(v, 1) }))));
  };
  const slider = h("input", { type: "range", id: "time", min: 0, max: t.length - 1, step: 1, value: at,
    "aria-label": "time in the run",
    oninput: (ev) => { at = parseInt(ev.target.value, 10); drawAt(); history.replaceState(null, "", location.pathname + "?t=" + at); } });
  drawAt();

  const queues = [...new Set(shown.flatMap((r) => Object.keys(r.timeline.wait_quantiles.per_queue)))].sort();
  const qs = shown[0].timeline.wait_quantiles.q;
  const waits = h("div", { class: "charts", id: "waits" }, queues.map((name) => h("figure", { "data-queue": name },
    h("figcaption", {}, `queue ${name}: share of attempts that waited at most (hours)`),
    (() => {
      // CDF: x = wait (hours), y = share; each run's quantiles as points joined.
      const series = shown.map((r) => ({ name: label(r), values: (r.timeline.wait_quantiles.per_queue[name] || []).map((v) => v / 3600) }));
      const xsMax = Math.max(0.01, ...series.flatMap((sr) => sr.values));
      const svg = s("svg", { class: "chart", width: 320, height: 190 });
      const m = { l: 36, r: 10, t: 8, b: 28 }, w = 320 - m.l - m.r, hg = 190 - m.t - m.b;
      const X = (v) => m.l + w * Math.sqrt(v / xsMax), Y = (p) => m.t + hg - hg * p / 100;
      svg.appendChild(s("line", { class: "axis", x1: m.l, x2: m.l + w, y1: m.t + hg, y2: m.t + hg }));
      svg.appendChild(s("line", { class: "axis", x1: m.l, x2: m.l, y1: m.t, y2: m.t + hg }));
      svg.appendChild(s("text", { x: 4, y: Y(100) + 4 }, "100%"));
      svg.appendChild(s("text", { x: 10, y: Y(0) }, "0"));
      for (const f of [0.25, 1]) svg.appendChild(s("text", { x: X(xsMax * f) - 12, y: 190 - 14 }, fmt(xsMax * f, 2) + " h"));
      series.forEach((sr, i) => {
        const d = sr.values.map((v, k) => (k ? "L" : "M") + X(v).toFixed(1) + " " + Y(qs[k]).toFixed(1)).join("");
        svg.appendChild(s("path", { class: `line s${i % 2}`, d }));
        sr.values.forEach((v, k) => svg.appendChild(hover(s("circle", { class: `dot s${i % 2}`, cx: X(v), cy: Y(qs[k]), r: 2.5 }),
          `${sr.name}: ${qs[k]}% of attempts waited at most ${duration(v * 3600)}`)));
      });
      return svg;
    })())));

  const teams = [...new Set(shown.flatMap((r) => Object.keys(r.per_team)))].sort();
  const costMax = Math.max(1, ...shown.flatMap((r) => teams.map((tm) => (r.per_team[tm] || {}).cost || 0)));
  const bw = 26, gap = 18, ch = 170;
  const cost = s("svg", { class: "chart", id: "cost", width: 60 + teams.length * (shown.length * bw + gap), height: ch + 40 });
  teams.forEach((tm, i) => {
    shown.forEach((r, j) => {
      const v = (r.per_team[tm] || {}).cost || 0;
      const hh = ch * v / costMax;
      const x = 50 + i * (shown.length * bw + gap) + j * bw;
      cost.appendChild(hover(s("rect", { class: `s${j % 2}`, x, y: 10 + ch - hh, width: bw - 3, height: hh, "data-team": tm }),
        `${tm}, ${label(r)}: ${fmt(v, 2)} CHF, ${fmt((r.per_team[tm] || {}).gpu_hours || 0, 1)} GPU-hours`));
    });
    cost.appendChild(s("text", { x: 50 + i * (shown.length * bw + gap), y: ch + 24 }, tm));
  });
  cost.appendChild(s("text", { x: 2, y: 14 }, fmt(costMax, 0)));
  cost.appendChild(s("text", { x: 2, y: ch + 10 }, "0 CHF"));

  const legendRuns = h("div", { class: "legend" }, shown.map((r, i) => h("span", {}, h("span", { class: "swatch", "data-run": i }), label(r))));
  for (const [i, el] of [...legendRuns.querySelectorAll(".swatch")].entries()) el.style.background = i % 2 ? "#e8590c" : "#1c7ed6";
  return h("div", {}, h("h1", {}, "What-if: " + (doc.pair ? `${label(shown[0])} against ${label(shown[1])}` : label(shown[0]))),
    legendRuns, doc.advice ? drawAdvice(doc.advice) : null, doc.calibration ? drawCalibration(doc.calibration) : null,
    h("h2", {}, "KPIs"), kpiTable(runs, doc.pair, doc.kpiRows),
    h("h2", {}, "Replay"), h("div", { class: "slider" }, slider, clock), replay, timeCharts,
    h("h2", {}, "Wait distributions"), waits, h("h2", {}, "Cost per team"), cost);
}

// ---- start --------------------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  state.page = pageOf(location.pathname);
  refresh().then(listen);
});
