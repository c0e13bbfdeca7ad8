// raybus console: read-only pages over the status service's API. Plain DOM and inline SVG, no libraries,
// nothing fetched from outside this server.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const KINDS = ["RayJob", "RayService", "RayCluster", "RayCronJob"];
const PLURAL = { RayJob: "rayjobs", RayService: "rayservices", RayCluster: "rayclusters", RayCronJob: "raycronjobs" };
// Lanes of each kind's state machines, in the order they are drawn; other recorded fields follow.
const LANES = {
  RayJob: ["jobDeploymentStatus", "jobStatus"],
  RayService: ["serviceStatus", "condition/Ready", "condition/UpgradeInProgress"],
  RayCluster: ["state", "condition/HeadPodReady", "condition/RayClusterProvisioned"],
  RayCronJob: [],
};
// Fields that are moments, not states: drawn as marks on the "steps" lane.
const MOMENTS = new Set(["schedule", "clusterDeleted", "rollback", "traffic", "pendingCluster", "activeCluster"]);
const GOOD = new Set(["Complete", "SUCCEEDED", "Running", "ready", "True", "Ready", "created"]);
const BAD = new Set(["Failed", "FAILED", "ValidationFailed", "failed", "deleted", "STOPPED"]);
const BUSY = new Set(["Initializing", "Running", "RUNNING", "PENDING", "Upgrading", "Suspending", "Retrying", "Waiting"]);
const PALETTE = ["#2f6fde", "#8e5bd6", "#0f9aa8", "#c2652a", "#5b7d2f", "#b8457a", "#4b5d80"];

let settings = { trace_url_template: "", partitions: 0 };

// ---------- helpers ----------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "onclick" || k === "oninput" || k === "onchange") el[k] = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  return el;
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  return el;
}

async function api(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.message || `${response.status} ${response.statusText}: ${path}`);
  return body;
}

async function allPages(path) {
  const items = [];
  let after = null;
  for (;;) {
    const sep = path.includes("?") ? "&" : "?";
    const page = await api(`${path}${sep}limit=1000${after === null ? "" : `&after=${after}`}`);
    items.push(...page.items);
    if (page.next_after === null || page.next_after === undefined) return items;
    after = page.next_after;
  }
}

function ms(t) { return t ? Date.parse(t) : NaN; }

function stamp(t) {
  if (!t) return "–";
  return new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function age(t, now) {
  const sec = Math.max(0, Math.floor((now - ms(t)) / 1000));
  if (sec < 120) return `${sec}s`;
  const min = Math.floor(sec / 60);
  if (min < 180) return `${min}m`;
  const hours = Math.floor(min / 60);
  if (hours < 48) return `${hours}h`;
  return `${Math.floor(hours / 24)}d`;
}

function tone(value) {
  if (GOOD.has(value)) return "ok";
  if (BAD.has(value)) return "bad";
  if (BUSY.has(value)) return "run";
  if (value === "False" || value === "") return "gone";
  return "warn";
}

function colour(value) {
  switch (tone(value)) {
    case "ok": return "#2e9e5b";
    case "bad": return "#d2453d";
    case "run": return "#2f6fde";
    case "gone": return "#9aa3b2";
    default: {
      let n = 0;
      for (const ch of String(value)) n = (n * 31 + ch.charCodeAt(0)) >>> 0;
      return PALETTE[n % PALETTE.length];
    }
  }
}

function badge(value, extra) {
  return h("span", { class: `badge ${extra || tone(value)}` }, value || "–");
}

function traceLink(traceId) {
  if (!traceId) return "–";
  const short = traceId.slice(0, 8);
  if (!settings.trace_url_template) return h("span", { class: "mono", title: traceId }, short);
  const href = settings.trace_url_template.replaceAll("{trace_id}", encodeURIComponent(traceId));
  return h("a", { class: "mono trace", href, target: "_blank", rel: "noopener", title: traceId }, short);
}

function objectHref(kind, namespace, name, uid) {
  const q = uid ? `?uid=${encodeURIComponent(uid)}` : "";
  return `#/object/${kind}/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}${q}`;
}

function show(...nodes) {
  const view = document.getElementById("view");
  view.replaceChildren(...nodes.flat(Infinity).filter((n) => n !== null && n !== undefined));
}

function table(headers, rows, attrs) {
  return h("table", attrs || {}, h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))), h("tbody", {}, rows));
}

// ---------- overview ----------

function lastTransition(resource) {
  let best = null;
  for (const [field, v] of Object.entries(resource.fields || {})) {
    if (!best || ms(v.at) > ms(best.at)) best = { field, value: v.value, at: v.at };
  }
  return best;
}

async function overview(params) {
  const resources = await allPages("/v1/resources");
  const now = Date.now();
  const kind = h("select", { id: "f-kind" }, h("option", { value: "" }, "every kind"), KINDS.map((k) => h("option", { value: k }, k)));
  const namespaces = [...new Set(resources.map((r) => r.namespace))].sort();
  const ns = h("select", { id: "f-namespace" }, h("option", { value: "" }, "every namespace"), namespaces.map((n) => h("option", { value: n }, n)));
  const text = h("input", { id: "f-text", type: "search", placeholder: "name or status contains…" });
  const deleted = h("input", { id: "f-deleted", type: "checkbox", checked: true });
  kind.value = params.get("kind") || "";
  ns.value = params.get("namespace") || "";
  const body = h("tbody");
  const count = h("span", { class: "muted", id: "f-count" });
  const render = () => {
    const rows = resources
      .filter((r) => !kind.value || r.kind === kind.value)
      .filter((r) => !ns.value || r.namespace === ns.value)
      .filter((r) => deleted.checked || !r.deleted_at)
      .filter((r) => !text.value || `${r.name} ${r.status}`.toLowerCase().includes(text.value.toLowerCase()))
      .sort((a, b) => a.kind.localeCompare(b.kind) || a.namespace.localeCompare(b.namespace) || a.name.localeCompare(b.name) || ms(a.first_seen) - ms(b.first_seen));
    body.replaceChildren(...rows.map((r) => {
      const last = lastTransition(r);
      return h("tr", { class: r.deleted_at ? "resource deleted" : "resource", "data-kind": r.kind, "data-name": r.name },
        h("td", {}, r.kind),
        h("td", {}, r.namespace),
        h("td", {}, h("a", { href: objectHref(r.kind, r.namespace, r.name, r.uid) }, r.name)),
        h("td", {}, badge(r.status)),
        h("td", {}, last ? `${last.field} → ${last.value || "–"}` : "–", h("div", { class: "muted" }, last ? stamp(last.at) : "")),
        h("td", { title: stamp(r.first_seen) }, age(r.first_seen, now)),
        h("td", {}, r.deleted_at ? h("span", { title: stamp(r.deleted_at) }, badge("deleted", "gone"), " ", age(r.deleted_at, now), " ago") : "–"));
    }));
    count.textContent = `${rows.length} of ${resources.length}`;
  };
  for (const el of [kind, ns, text, deleted]) { el.oninput = render; el.onchange = render; }
  render();
  show(
    h("h1", {}, "Custom resources"),
    h("div", { class: "filters" }, h("label", {}, "Kind ", kind), h("label", {}, "Namespace ", ns), text,
      h("label", {}, deleted, "deleted ones too"), count),
    h("table", { id: "resources" }, h("thead", {}, h("tr", {}, ["Kind", "Namespace", "Name", "State", "Last transition", "Age", "Deleted"].map((x) => h("th", {}, x)))), body),
  );
}

// ---------- one object: swimlanes ----------

function stateLanes(kind, transitions) {
  const byField = new Map();
  for (const t of transitions) {
    if (MOMENTS.has(t.field) || t.field === "lifecycle") continue;
    if (!byField.has(t.field)) byField.set(t.field, []);
    byField.get(t.field).push({ at: ms(t.at), value: t.to_value, t });
  }
  const order = [...(LANES[kind] || []).filter((f) => byField.has(f)), ...[...byField.keys()].filter((f) => !(LANES[kind] || []).includes(f)).sort()];
  return order.map((field) => ({ field, label: field, points: byField.get(field) }));
}

// The RayService's clusters over time, folded from its step facts as the status service folds them.
function serviceLanes(transitions) {
  const active = [], pending = [], share = [];
  let cur = { active: "", pending: "", percent: null };
  const push = (t, next) => {
    const at = ms(t.at);
    if (next.active !== cur.active) active.push({ at, value: next.active, t });
    if (next.pending !== cur.pending) pending.push({ at, value: next.pending, t });
    const pct = next.pending ? (next.percent === null ? 0 : next.percent) : null;
    const before = cur.pending ? (cur.percent === null ? 0 : cur.percent) : null;
    if (pct !== before) share.push({ at, value: pct === null ? "" : `${pct}%`, pct, t });
    cur = next;
  };
  for (const t of transitions) {
    const a = t.attributes || {};
    if (t.field === "pendingCluster") push(t, { ...cur, pending: t.to_value, percent: null });
    else if (t.field === "activeCluster") {
      const promoted = cur.pending === t.to_value;
      if (promoted) share.push({ at: ms(t.at), value: "100%", pct: 100, t, instant: true });
      push(t, { active: t.to_value, pending: promoted ? "" : cur.pending, percent: promoted ? null : cur.percent });
    } else if (t.field === "traffic" && a.toPercent !== undefined && cur.pending) {
      const p = Number(a.toPercent);
      if (a.to === cur.pending) push(t, { ...cur, percent: p });
      else if (a.from === cur.pending) push(t, { ...cur, percent: 100 - p });
    } else if (t.field === "rollback" && t.to_value === "Complete") push(t, { ...cur, pending: "", percent: null });
  }
  const lanes = [];
  if (active.length) lanes.push({ field: "activeCluster", label: "active cluster", points: active });
  if (pending.length) lanes.push({ field: "pendingCluster", label: "pending cluster", points: pending });
  if (share.length) lanes.push({ field: "pendingTraffic", label: "pending traffic", points: share.filter((p) => !p.instant), spikes: share.filter((p) => p.instant), percent: true });
  return lanes;
}

function swimlanes(resource, transitions) {
  const kind = resource.kind;
  const lanes = stateLanes(kind, transitions);
  if (kind === "RayService") lanes.splice(1, 0, ...serviceLanes(transitions));
  const moments = transitions.filter((t) => MOMENTS.has(t.field) && !(kind === "RayService" && (t.field === "pendingCluster" || t.field === "activeCluster")));
  if (moments.length) lanes.push({ field: "steps", label: "steps", moments });
  const start = ms(resource.first_seen);
  // A live object's picture ends a little after its last transition: its latest states go on from there.
  const last = Math.max(start, ...transitions.map((t) => ms(t.at)));
  const end = resource.deleted_at ? Math.max(ms(resource.deleted_at), last) : last + Math.max((last - start) * 0.1, 1000);
  const span = Math.max(end - start, 1000);
  const W = 1100, left = 205, right = 20, laneH = 26, gap = 8, top = 10;
  const height = top + lanes.length * (laneH + gap) + 34;
  const x = (t) => left + ((t - start) / span) * (W - left - right);
  const svg = s("svg", { viewBox: `0 0 ${W} ${height}`, role: "img", "aria-label": `${kind} ${resource.name} over time`, id: "swimlanes" });
  for (let i = 0; i <= 6; i++) {
    const t = start + (span * i) / 6;
    const gx = x(t);
    svg.append(s("line", { class: "gridline", x1: gx, x2: gx, y1: top, y2: height - 24 }));
    const offset = ((t - start) / 1000).toFixed(span < 20000 ? 1 : 0);
    const label = i === 0 ? stamp(new Date(start).toISOString()) : i === 6 && !resource.deleted_at ? `+${offset}s, still so` : `+${offset}s`;
    svg.append(s("text", { class: "axis", x: gx, y: height - 8, "text-anchor": i === 0 ? "start" : i === 6 ? "end" : "middle" }, label));
  }
  lanes.forEach((lane, i) => {
    const y = top + i * (laneH + gap);
    const g = s("g", { class: "lane", "data-field": lane.field });
    g.append(s("text", { class: "lane-label", x: 8, y: y + laneH / 2 + 4 }, lane.label));
    g.append(s("rect", { x: left, y, width: W - left - right, height: laneH, fill: "#f3f5f9" }));
    if (lane.moments) {
      for (const t of lane.moments) {
        const mx = x(ms(t.at));
        g.append(s("path", { class: "mark moment", d: `M${mx} ${y + 3} l6 ${laneH / 2 - 3} l-6 ${laneH / 2 - 3} l-6 ${-(laneH / 2 - 3)} z`, fill: colour(t.field), "data-field": t.field },
          s("title", {}, `${stamp(t.at)}  ${t.field}: ${t.from_value || "–"} → ${t.to_value || "–"}  ${t.reason}`)));
      }
    } else {
      lane.points.forEach((p, j) => {
        const next = j + 1 < lane.points.length ? lane.points[j + 1].at : end;
        const x0 = x(p.at), x1 = Math.max(x(next), x0 + 2);
        if (p.value === "") return;
        const segment = s("g", { class: "segment", "data-value": p.value });
        if (lane.percent) {
          const hgt = Math.max(2, (laneH - 4) * (p.pct / 100));
          segment.append(s("rect", { x: x0, y: y + laneH - 2 - hgt, width: x1 - x0, height: hgt, fill: "#8e5bd6", rx: 2 }));
        } else {
          segment.append(s("rect", { x: x0, y: y + 3, width: x1 - x0, height: laneH - 6, fill: colour(p.value), rx: 3 }));
        }
        segment.append(s("title", {}, `${lane.label} = ${p.value} from ${stamp(new Date(p.at).toISOString())}${p.t.reason ? ` (${p.t.reason})` : ""}`));
        if (x1 - x0 > p.value.length * 6.5 + 8) {
          segment.append(s("text", { class: "seg-label", x: x0 + 5, y: y + laneH / 2 + 4, fill: lane.percent ? "#4b2a86" : "#fff" }, p.value));
        }
        g.append(segment);
        g.append(s("circle", { class: "mark", cx: x0, cy: y + laneH / 2, r: 4, fill: lane.percent ? "#8e5bd6" : colour(p.value) }));
      });
      for (const p of lane.spikes || []) {
        const sx = x(p.at);
        g.append(s("rect", { class: "mark spike", x: sx - 2, y: y + 2, width: 4, height: laneH - 4, fill: "#8e5bd6" }, s("title", {}, `traffic switched to the pending cluster (100%) at ${stamp(p.t.at)}`)));
      }
    }
    svg.append(g);
  });
  if (resource.deleted_at) {
    const dx = x(ms(resource.deleted_at));
    svg.append(s("line", { class: "end", x1: dx, x2: dx, y1: top - 4, y2: height - 24 }, s("title", {}, `deleted ${stamp(resource.deleted_at)}`)));
  }
  return svg;
}

async function relatedObjects(resource, transitions, commands) {
  const ns = resource.namespace;
  const links = [];
  if (resource.kind === "RayCronJob") {
    const runs = await api(`/v1/raycronjobs/${encodeURIComponent(ns)}/${encodeURIComponent(resource.name)}/runs?uid=${encodeURIComponent(resource.uid)}`).catch(() => ({ runs: [] }));
    for (const run of runs.runs) if (run.rayjob_name) links.push(["RayJob", run.rayjob_name, run.deployment_status || "–", run.rayjob_uid]);
    return links;
  }
  const names = new Set();
  for (const t of transitions) {
    if (t.attributes && t.attributes.rayClusterName) names.add(t.attributes.rayClusterName);
    if (resource.kind === "RayService" && (t.field === "pendingCluster" || t.field === "activeCluster") && t.to_value) names.add(t.to_value);
  }
  for (const c of commands) if (c.verb === "create_object" && c.target.startsWith("RayCluster ")) names.add(c.target.split("/").pop());
  for (const name of names) {
    const found = await api(`/v1/rayclusters/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`).catch(() => null);
    links.push(["RayCluster", name, found ? (found.deleted_at ? "deleted" : found.status) : "not in the history", found ? found.uid : null]);
  }
  return links;
}

function relatedTable(related, namespace) {
  const rows = related.map(([kind, name, state, uid]) => h("tr", { class: "related" },
    h("td", {}, kind), h("td", {}, h("a", { href: objectHref(kind, namespace, name, uid) }, name)), h("td", {}, badge(state))));
  return table(["Kind", "Name", "State"], rows, { id: "related" });
}

async function objectPage(kind, namespace, name, params) {
  const uid = params.get("uid");
  const base = `/v1/resources/${kind}/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`;
  const history = await api(`${base}/transitions?limit=1000${uid ? `&uid=${encodeURIComponent(uid)}` : ""}`);
  while (history.next_after !== null && history.next_after !== undefined) {
    const page = await api(`${base}/transitions?limit=1000&after=${history.next_after}&uid=${encodeURIComponent(history.resource.uid)}`);
    history.transitions.push(...page.transitions);
    history.next_after = page.next_after;
  }
  const resource = history.resource;
  const keyQuery = `kind=${kind}&namespace=${encodeURIComponent(namespace)}&name=${encodeURIComponent(name)}`;
  const [commands, events] = await Promise.all([
    allPages(`/v1/commands?${keyQuery}`),
    api(`/v1/events/${kind}/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`).catch((e) => ({ items: [], error: e.message })),
  ]);
  const mine = commands.filter((c) => !resource.uid || ms(c.at) >= ms(resource.first_seen) - 1000);
  const related = await relatedObjects(resource, history.transitions, mine);
  const byCommand = new Map(mine.map((c) => [c.command_id, c]));
  const view = resource.rayservice || resource.rayjob;
  const facts = [
    ["uid", resource.uid], ["state", badge(resource.status)], ["created", stamp(resource.first_seen)],
    ["deleted", resource.deleted_at ? stamp(resource.deleted_at) : "–"],
  ];
  if (resource.rayjob) facts.push(["job id", view.job_id || "–"], ["cluster", view.cluster_name || "–"], ["attempts", view.attempts]);
  if (resource.rayservice) facts.push(["active", view.active_cluster || "–"], ["pending", view.pending_cluster || "–"],
    ["upgrades", `${view.upgrades}${view.last_upgrade_seconds !== null ? `, the last took ${view.last_upgrade_seconds.toFixed(1)}s` : ""}`], ["rollbacks", view.rollbacks]);
  show(
    h("p", {}, h("a", { href: "#/" }, "← all resources")),
    h("h1", {}, `${kind} ${namespace}/${name}`),
    h("div", { class: "card" }, h("dl", { class: "kv", id: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      h("p", {}, h("a", { href: `#/replay/${kind}/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}${resource.uid ? `?uid=${encodeURIComponent(resource.uid)}` : ""}`, id: "replay-link" }, "Replay its decisions →"))),
    h("h2", {}, "Life"),
    h("div", { class: "card lanes" }, swimlanes(resource, history.transitions)),
    related.length ? [h("h2", {}, resource.kind === "RayCronJob" ? "RayJobs it created" : "Clusters"), relatedTable(related, namespace)] : null,
    h("h2", {}, `Transitions (${history.transitions.length})`),
    table(["At", "Field", "From → to", "Reason", "Message", "Trace"], history.transitions.map((t) => h("tr", { class: "transition" },
      h("td", { class: "mono" }, stamp(t.at)), h("td", {}, t.field), h("td", {}, `${t.from_value || "–"} → ${t.to_value || "–"}`),
      h("td", {}, t.reason || "–"), h("td", {}, t.message || "–"), h("td", {}, traceLink(t.trace_id)))), { id: "transitions" }),
    h("h2", {}, `Command audit (${mine.length})`),
    table(["At", "Verb", "Target", "Outcome", "Code", "Error", "Trace"], mine.map((c) => h("tr", { class: "command" },
      h("td", { class: "mono" }, stamp(c.at)), h("td", {}, c.verb), h("td", {}, c.target), h("td", {}, badge(c.outcome, c.outcome === "applied" ? "ok" : c.outcome === "failed" || c.outcome === "denied" ? "bad" : "warn")),
      h("td", {}, c.status_code || "–"), h("td", {}, c.error || ""), h("td", {}, traceLink(c.trace_id)))), { id: "audit" }),
    h("h2", {}, `Events (${events.items.length})`),
    events.error ? h("p", { class: "error" }, events.error) : null,
    table(["At", "Type", "Reason", "Message", "Outcome", "Trace"], events.items.map((e) => {
      const c = byCommand.get(e.command_id);
      return h("tr", { class: "event" }, h("td", { class: "mono" }, stamp(e.at)), h("td", {}, badge(e.type, e.type === "Warning" ? "bad" : "run")),
        h("td", {}, e.reason), h("td", {}, e.message), h("td", {}, c ? c.outcome : "–"), h("td", {}, traceLink(c ? c.trace_id : "")));
    }), { id: "events" }),
  );
}

// ---------- replay ----------

async function replayPage(kind, namespace, name, params) {
  const uid = params.get("uid");
  const step = params.get("step");
  const base = `/v1/replay/${kind}/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`;
  const query = new URLSearchParams();
  if (uid) query.set("uid", uid);
  if (step) query.set("step", step);
  show(h("h1", {}, `Replay of ${kind} ${namespace}/${name}`), h("p", { class: "muted" }, "A reconciler is replaying the recorded decisions with today's code…"));
  const view = await api(`${base}?${query}`);
  const counts = { match: 0, diverged: 0, unverifiable: 0 };
  for (const st of view.steps) counts[st.verdict] = (counts[st.verdict] || 0) + 1;
  const here = (n) => {
    const q = new URLSearchParams(query);
    q.set("step", String(n));
    return `#/replay/${kind}/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}?${q}`;
  };
  const current = step ? Number(step) : null;
  const indices = view.steps.map((st) => st.index);
  const pos = current === null ? -1 : indices.indexOf(current);
  const nav = h("div", { class: "filters" },
    h("button", { id: "prev-step", disabled: pos <= 0, onclick: () => { location.hash = here(indices[pos - 1]); } }, "← previous"),
    h("button", { id: "next-step", disabled: pos >= indices.length - 1, onclick: () => { location.hash = here(indices[pos + 1] ?? indices[0]); } }, "next →"),
    h("span", { class: "muted" }, current === null ? "pick a step" : `step ${current} of ${indices.length}`));
  const rows = view.steps.map((st) => h("tr", { class: `step${st.index === current ? " selected" : ""}`, "data-verdict": st.verdict },
    h("td", {}, h("a", { href: here(st.index) }, st.index)),
    h("td", { class: "mono" }, stamp(st.issued_at)),
    h("td", {}, badge(st.verdict, st.verdict === "match" ? "ok" : st.verdict === "diverged" ? "bad" : "warn")),
    h("td", {}, st.recorded.length ? st.recorded.map((c) => h("div", { class: "mono" }, c)) : h("span", { class: "muted" }, "no commands")),
    h("td", {}, st.verdict === "diverged" ? [st.error ? h("div", { class: "error" }, st.error) : null, ...st.diff.map((d) => h("div", { class: "mono" }, d))] : h("span", { class: "muted" }, "same")),
    h("td", {}, st.rules.map((r) => h("div", { class: "mono" }, r)))));
  show(
    h("p", {}, h("a", { href: objectHref(kind, namespace, name, uid) }, `← ${kind} ${namespace}/${name}`)),
    h("h1", {}, `Replay of ${kind} ${namespace}/${name}`),
    h("p", { id: "replay-summary" }, `${view.steps.length} decision(s): ${counts.match} match, ${counts.diverged} diverged, ${counts.unverifiable} unverifiable`,
      h("span", { class: "muted" }, ` — today's reconcile logic version ${view.logic_version}`)),
    nav,
    h("div", { class: "row" },
      h("div", { class: "grow" }, table(["#", "Issued at", "Verdict", "Recorded commands", "Today's decision", "Rules that fired"], rows, { id: "steps" })),
      view.detail ? h("div", { class: "grow" }, h("pre", { class: "detail", id: "step-detail" }, view.detail)) : null),
  );
}

// ---------- bus ----------

async function busPage() {
  const bus = await api("/v1/bus");
  const W = 900, H = 150, left = 30, bottom = 22;
  const max = Math.max(1, ...bus.partitions.map((p) => p.lag || 0));
  const bw = (W - left) / Math.max(bus.partitions.length, 1);
  const chart = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "bars", id: "lag-chart", role: "img", "aria-label": "lag per partition" },
    bus.partitions.map((p, i) => {
      const hgt = ((p.lag || 0) / max) * (H - bottom - 16);
      return s("g", { class: "bar", "data-partition": p.partition },
        s("rect", { class: "lag", x: left + i * bw + 3, y: H - bottom - hgt, width: Math.max(bw - 6, 1), height: Math.max(hgt, 1) },
          s("title", {}, `partition ${p.partition}: lag ${p.lag ?? "no consumer"}, owner ${p.owner || "none"}`)),
        s("text", { x: left + i * bw + bw / 2, y: H - 6, "text-anchor": "middle" }, p.partition));
    }),
    s("text", { x: 0, y: 12 }, `lag (max ${max})`));
  show(
    h("h1", {}, "The bus"),
    h("p", {}, `Workers alive: `, bus.workers.length ? bus.workers.map((w) => h("span", { class: "badge run worker" }, w)) : h("span", { class: "muted" }, "none")),
    h("div", { class: "card" }, chart),
    h("h2", {}, `Partitions (${bus.partitions.length})`),
    table(["Partition", "Owner", "Pending", "Ack pending", "Lag"], bus.partitions.map((p) => h("tr", { class: "partition" },
      h("td", {}, p.partition), h("td", {}, p.owner || h("span", { class: "muted" }, "unowned")),
      h("td", {}, p.pending ?? "–"), h("td", {}, p.ack_pending ?? "–"), h("td", {}, p.lag ?? "no consumer"))), { id: "partitions" }),
    h("h2", {}, `Dead letters (${bus.dead_letters_total})`),
    bus.dead_letters.length
      ? table(["Seq", "At", "From", "Subject", "Deliveries", "Reason"], bus.dead_letters.map((d) => h("tr", { class: "dead-letter" },
        h("td", {}, d.seq), h("td", { class: "mono" }, stamp(d.at)), h("td", {}, `${d.stream} #${d.sequence}`), h("td", { class: "mono" }, d.subject),
        h("td", {}, d.deliveries), h("td", { class: "reason" }, d.reason))), { id: "dead-letters" })
      : h("p", { class: "muted", id: "dead-letters" }, "No dead letters."),
  );
}

// ---------- routing ----------

async function route() {
  const [path, query] = (location.hash.replace(/^#/, "") || "/").split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", (parts[0] || "resources") === a.dataset.nav || (parts[0] !== "bus" && a.dataset.nav === "resources"));
  try {
    if (parts[0] === "object" && parts.length === 4) await objectPage(parts[1], parts[2], parts[3], params);
    else if (parts[0] === "replay" && parts.length === 4) await replayPage(parts[1], parts[2], parts[3], params);
    else if (parts[0] === "bus") await busPage();
    else await overview(params);
    document.getElementById("status-line").textContent = `loaded ${new Date().toISOString().slice(11, 19)}Z`;
  } catch (err) {
    show(h("h1", {}, "Cannot show this page"), h("p", { class: "error", id: "page-error" }, err.message));
  }
  document.body.dataset.ready = location.hash || "#/";
}

window.addEventListener("hashchange", route);
api("/v1/console").then((got) => { settings = got; }).catch(() => {}).finally(route);
