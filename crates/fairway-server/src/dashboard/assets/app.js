// Fairway's dashboard: one snapshot (`GET /v1/dashboard`) polled every two seconds, drawn
// into three views (cluster, queues, quotas) and a page per job. No framework and no build
// step; every piece of text from the server goes in through textContent, never as markup.
"use strict";

const POLL_MS = 2000;
const TOKEN_KEY = "fairway.token";

const state = { token: null, snapshot: null, timer: null, route: null, failures: 0 };

// ---- small helpers ------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function duration(seconds) {
  let s = Math.max(0, Math.round(seconds));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${m}m`;
  if (m > 0) return `${m}m ${s}s`;
  return `${s}s`;
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

function estimate(e, now) {
  if (!e) return "";
  switch (e.kind) {
    case "at": return e.at_ms <= now ? "now" : `in ${duration((e.at_ms - now) / 1000)} (${clock(e.at_ms)})`;
    case "not_before": return `not before ${clock(e.at_ms)}`;
    case "not_placeable": return "cannot be placed";
    case "not_forecast": return "beyond the forecast";
    default: return e.kind;
  }
}

// A tenant's colour class: stable for a name, one of eight (the cells also say the name).
function tenantClass(tenant) {
  let h = 0;
  for (const c of tenant) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return `t${h % 8}`;
}

function jobLink(id, name) {
  return el("a", { href: `#/jobs/${id}`, "data-job-id": id, "data-key": `job-${id}` }, name);
}

// Replaces the view, keeping the keyboard focus on the same control if it is still there.
function show(content) {
  const active = document.activeElement;
  const key = active && active.dataset ? active.dataset.key : null;
  document.getElementById("view").replaceChildren(content);
  if (key) {
    const again = document.querySelector(`#view [data-key="${CSS.escape(key)}"]`);
    if (again) again.focus({ preventScroll: true });
  }
}

function setStatus(text, bad) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.classList.toggle("error", Boolean(bad));
}

// ---- talking to the server ----------------------------------------------------------------

class Unauthenticated extends Error {}

async function api(path, options) {
  // Without a token, ask anyway: a controller without api_tokens_file needs none.
  const headers = state.token ? { Authorization: `Bearer ${state.token}` } : {};
  if (options && options.method && options.method !== "GET") headers["Content-Type"] = "application/json";
  const response = await fetch(path, { ...options, headers, cache: "no-store", credentials: "omit" });
  if (response.status === 401) throw new Unauthenticated((await response.json()).error.message);
  return response;
}

async function json(path) {
  const response = await api(path);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error ? body.error.message : `${path}: ${response.status}`);
  return body;
}

// Back to the sign-in form; `message` says why, unless no token was tried.
function signOut(message) {
  if (!state.token) message = "";
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  clearTimeout(state.timer);
  document.getElementById("view").replaceChildren();
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
  document.getElementById("who").textContent = "";
  document.getElementById("token").focus();
}

async function refresh() {
  clearTimeout(state.timer);
  try {
    state.snapshot = await json("/v1/dashboard");
    state.failures = 0;
    render();
    // The first view drawn with data, once painted (two frames on): what the benchmark times.
    if (!performance.getEntriesByName("fairway-first-render").length) {
      requestAnimationFrame(() => requestAnimationFrame(() => {
        if (!performance.getEntriesByName("fairway-first-render").length) performance.mark("fairway-first-render");
      }));
    }
    setStatus(`Updated ${clock(state.snapshot.generated_at_ms)}`);
  } catch (e) {
    if (e instanceof Unauthenticated) return signOut(e.message);
    state.failures += 1;
    setStatus(`Cannot reach the server (${e.message}); trying again`, true);
  }
  state.timer = setTimeout(refresh, POLL_MS * Math.min(1 + state.failures, 5));
}

// ---- views --------------------------------------------------------------------------------

function render() {
  const s = state.snapshot;
  if (!s) return;
  const who = s.viewer.role === "read-only" ? "read-only view" : `${s.viewer.user} (${s.viewer.project}, ${s.viewer.role})`;
  document.getElementById("who").textContent = who;
  const route = state.route;
  for (const link of document.querySelectorAll(".top nav a")) {
    if (link.dataset.view === route.view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (route.view === "job") return renderJob(route.id);
  const view = { cluster: clusterView, queues: queuesView, quotas: quotasView }[route.view] || clusterView;
  show(view(s));
}

function clusterView(s) {
  const tenants = new Set();
  // A preemptor waits in the queue: its name, where the viewer may see it.
  const names = new Map(s.pending.map((j) => [j.id, j.name]));
  const preemptor = (id) => (names.has(id) ? `${names.get(id)} (#${id})` : `#${id}`);
  const nodes = s.nodes.map((node) => {
    const cells = node.gpus.map((gpu) => {
      const key = `gpu-${node.name}-${gpu.index}`;
      const held = gpu.held_for !== undefined && gpu.held_for !== null;
      if (gpu.job !== undefined && gpu.job !== null) {
        tenants.add(gpu.tenant);
        // A victim still stopping on a GPU already promised to its preemptor.
        const giving = held ? `; giving way to ${preemptor(gpu.held_for)}` : "";
        const label = `GPU ${gpu.index}: ${gpu.job_name} (#${gpu.job}), ${gpu.tenant}, ${gpu.tier}${giving}`;
        return el("a", { class: held ? "gpu held" : `gpu ${tenantClass(gpu.tenant)}`, href: `#/jobs/${gpu.job}`,
          "aria-label": label, title: label, "data-key": key, "data-job-id": gpu.job, "data-held-for": held ? gpu.held_for : null },
          el("b", { text: gpu.job_name }), held ? `→ ${preemptor(gpu.held_for)}` : `${gpu.tenant} · ${gpu.tier}`);
      }
      if (held) {
        const label = `GPU ${gpu.index}: held for ${preemptor(gpu.held_for)} while its victims stop`;
        return el("a", { class: "gpu held", href: `#/jobs/${gpu.held_for}`, "aria-label": label, title: label,
          "data-key": key, "data-held-for": gpu.held_for }, el("b", { text: "held" }), `for ${preemptor(gpu.held_for)}`);
      }
      if (gpu.other_tenant) {
        return el("span", { class: "gpu other", title: `GPU ${gpu.index}: taken by another project` },
          el("b", { text: "taken" }), "other project");
      }
      return el("span", { class: "gpu free", title: `GPU ${gpu.index}: free` }, el("b", { text: `${gpu.index}` }), "free");
    });
    // GPUs kept for a pending job's reservation: why free ones may stay idle.
    const reserved = (node.reserved || []).map((r) => {
      const whose = r.other_tenant ? "another project's job" : `${r.job_name ?? "job"} (#${r.job})`;
      const when = r.at_ms <= s.generated_at_ms ? "now" : `from ${clock(r.at_ms)}`;
      return el("li", {}, `${r.gpus} GPU${r.gpus === 1 ? "" : "s"} reserved for ${whose}, ${when}`);
    });
    return el("section", { class: "node", "aria-label": `node ${node.name}` },
      el("h3", {}, node.name, " ", el("span", { text: `${node.gpu_model}${node.schedulable ? "" : " · not schedulable"}` })),
      el("div", { class: "gpus" }, cells),
      reserved.length ? el("ul", { class: "reserved", "aria-label": `reservations on ${node.name}` }, reserved) : null);
  });
  const legend = [...tenants].sort().map((t) => el("li", { class: tenantClass(t) }, t));
  return el("section", { "aria-labelledby": "cluster-title" },
    el("h2", { id: "cluster-title", text: "Cluster" }),
    el("ul", { class: "summary" },
      el("li", {}, el("strong", { text: `${s.gpus_allocated} / ${s.gpus_total}` }), " GPUs allocated"),
      el("li", {}, el("strong", { text: `${s.gpus_held}` }), " held for preemptors"),
      el("li", {}, el("strong", { text: `${s.pending_total}` }), " jobs pending"),
      el("li", {}, el("strong", { text: `${s.placed_total}` }), " running or stopping")),
    legend.length ? el("ul", { class: "legend", "aria-label": "Tenants" }, legend) : null,
    el("div", { class: "nodes" }, nodes));
}

function table(caption, headers, rows, id) {
  return el("div", { class: "table-wrap" },
    el("table", { id },
      el("caption", { text: caption }),
      el("thead", {}, el("tr", {}, headers.map(([text, cls]) => el("th", { scope: "col", class: cls, text })))),
      el("tbody", {}, rows)));
}

function cancelButton(job) {
  if (!job.may_cancel) return null;
  return el("button", { type: "button", class: "danger", "data-key": `cancel-${job.id}`,
    "aria-label": `Cancel ${job.name} (#${job.id})`, onclick: () => cancel(job) }, "Cancel");
}

async function cancel(job) {
  if (!window.confirm(`Cancel ${job.name} (#${job.id})?`)) return;
  try {
    const response = await api(`/v1/jobs/${job.id}/cancel`, { method: "POST", body: "{}" });
    const body = await response.json();
    setStatus(response.ok ? `Cancelled ${job.name}` : body.error.message, !response.ok);
  } catch (e) {
    if (e instanceof Unauthenticated) return signOut(e.message);
    setStatus(e.message, true);
  }
  refresh();
}

function queuesView(s) {
  const now = s.generated_at_ms;
  const queues = s.queues.map((q) => el("tr", {},
    el("td", { text: q.tier }), el("td", { text: q.tenant }),
    el("td", { class: "num", text: q.pending }), el("td", { class: "num", text: q.placed }),
    el("td", { class: "num", text: q.gpus_allocated }),
    el("td", { class: "num", text: q.pending ? duration(q.oldest_wait_seconds) : "" }),
    el("td", { text: q.pending ? estimate(q.head_start_estimate, now) : "" })));
  const pending = s.pending.map((j) => el("tr", { "data-row-job": j.id },
    el("td", { class: "num", text: j.position ?? "" }),
    el("td", {}, jobLink(j.id, j.name)), el("td", { text: j.tenant }), el("td", { text: j.user }),
    el("td", { text: j.tier }), el("td", { class: "num", text: j.gpus }),
    el("td", { class: "num", text: duration(j.wait_seconds) }),
    el("td", { text: estimate(j.start_estimate, now) + (j.reserved_from_ms ? " · GPUs reserved" : "") }),
    el("td", { class: "why", text: j.reason || "" }),
    el("td", {}, cancelButton(j))));
  const placed = s.placed.map((j) => el("tr", { "data-row-job": j.id },
    el("td", {}, jobLink(j.id, j.name)), el("td", { text: j.tenant }), el("td", { text: j.tier }),
    el("td", { class: "num", text: j.gpus }),
    el("td", { text: j.state === "preempting" ? `preempting, for #${j.preemptor}` : j.state }),
    el("td", { text: j.placement || "" }), el("td", { class: "num", text: j.preemptions }),
    el("td", {}, cancelButton(j))));
  const more = (shown, total) => (total > shown ? el("p", { class: "more", text: `${total - shown} more not listed` }) : null);
  return el("section", { "aria-labelledby": "queues-title" },
    el("h2", { id: "queues-title", text: "Queues" }),
    table("Queues by tier and tenant", [["Tier"], ["Tenant"], ["Pending", "num"], ["Running", "num"], ["GPUs", "num"],
      ["Oldest wait", "num"], ["Head starts"]], queues, "queues"),
    table("Pending jobs, in the order they will be considered", [["#", "num"], ["Job"], ["Tenant"], ["User"], ["Tier"],
      ["GPUs", "num"], ["Waiting", "num"], ["Expected start"], ["Why it waits"], ["", ""]], pending, "pending"),
    more(s.pending.length, s.pending_total),
    table("Running jobs", [["Job"], ["Tenant"], ["Tier"], ["GPUs", "num"], ["State"], ["Where"], ["Preempted", "num"],
      ["", ""]], placed, "running"),
    more(s.placed.length, s.placed_total));
}

function bar(used, max, label) {
  const share = max ? Math.min(1, used / max) : 0;
  const fill = el("span");
  fill.style.width = `${Math.round(share * 100)}%`;
  return el("div", { class: `bar${max && used >= max ? " full" : ""}`, role: "meter", "aria-label": label,
    "aria-valuemin": 0, "aria-valuemax": max || 0, "aria-valuenow": used }, fill);
}

function quotasView(s) {
  // With fair sharing on, each account's share: what orders the tenants of a tier.
  const fair = s.quotas.some((q) => typeof q.fair_share === "number");
  const quotas = s.quotas.map((q) => {
    const max = q.gpus_max ?? null;
    const label = `${q.kind} ${q.account}: ${q.gpus_used} of ${max === null ? "unlimited" : max} GPUs`;
    return el("tr", {}, el("td", { text: q.kind }), el("td", { text: q.account }),
      el("td", {}, max === null ? "no cap" : bar(q.gpus_used, max, label)),
      el("td", { class: "num", text: `${q.gpus_used} / ${max === null ? "∞" : max}` }),
      fair ? el("td", { class: "num", text: typeof q.fair_share === "number" ? q.fair_share.toFixed(3) : "–" }) : null,
      fair ? el("td", { class: "num", text: q.fair_share_weight ?? "–" }) : null);
  });
  const quotaColumns = [["Kind"], ["Account"], ["Use"], ["GPUs", "num"]].concat(fair ? [["Fair share", "num"], ["Weight", "num"]] : []);
  const members = s.cohorts.flatMap((c) => c.members.map((m) => {
    const nominal = m.nominal ? m.nominal.gpus : undefined;
    // A stored cohort left out at start-up lends nothing: said by its name, why in its title.
    const name = c.left_out ? el("td", { text: `${c.name} (not in effect)`, title: c.left_out }) : el("td", { text: c.name });
    return el("tr", {},
      name, m.left_out ? el("td", { text: `${m.project} (not in effect)`, title: m.left_out }) : el("td", { text: m.project }),
      el("td", { class: "num", text: m.gpus_used }),
      el("td", { class: "num", text: nominal ?? "" }),
      el("td", { class: "num", text: nominal === undefined ? "" : c.left_out || m.left_out ? "–" : Math.max(0, m.gpus_used - nominal) }),
      el("td", { class: "num", text: m.borrowing_limit?.gpus ?? "none" }));
  }));
  return el("section", { "aria-labelledby": "quotas-title" },
    el("h2", { id: "quotas-title", text: "Quotas" }),
    table("GPU quotas (hard caps)", quotaColumns, quotas, "quotas"),
    members.length ? table("Cohorts: nominal quotas lent while idle", [["Cohort"], ["Project"], ["Uses", "num"],
      ["Nominal", "num"], ["Borrowed", "num"], ["Borrowing limit", "num"]], members, "cohorts") : null);
}

async function renderJob(id) {
  let detail;
  try {
    detail = await json(`/v1/jobs/${id}`);
  } catch (e) {
    if (e instanceof Unauthenticated) return signOut(e.message);
    show(el("section", {}, el("h2", { text: `Job #${id}` }), el("p", { class: "error", text: e.message })));
    return;
  }
  if (state.route.view !== "job" || state.route.id !== id) return;
  let log = "";
  if (state.snapshot && state.snapshot.driver === "server") {
    const response = await api(`/v1/jobs/${id}/logs?tail=100`);
    log = response.ok ? await response.text() : "";
  }
  const j = detail.job;
  const listed = state.snapshot ? [...state.snapshot.pending, ...state.snapshot.placed].find((x) => x.id === j.id) : null;
  const facts = [
    ["State", j.state], ["Tenant", `${j.project} (user ${j.user})`], ["Priority", `${j.priority_class || "custom"} (${j.priority})`],
    ["GPUs", `${j.replicas} × ${j.gpus_per_replica}${j.gpu_model ? ` ${j.gpu_model}` : ""}`],
    ["Waited", duration(j.wait_seconds)], ["Preempted", `${j.preemptions} time${j.preemptions === 1 ? "" : "s"}`], ["Restarts", j.restart_count],
  ];
  if (j.queue_position) facts.push(["Position", j.queue_position]);
  if (j.start_estimate) facts.push(["Expected start", estimate(j.start_estimate, Date.now())]);
  if (j.fair_share) facts.push(["Fair share", `project ${j.fair_share.project.toFixed(4)}, user ${j.fair_share.user.toFixed(4)} (least goes first in its priority)`]);
  if (j.reservation) {
    const nodes = j.reservation.nodes.map((n) => `${n.node} (${n.replicas} replica${n.replicas === 1 ? "" : "s"}, ${n.gpus} GPU${n.gpus === 1 ? "" : "s"})`).join(", ");
    facts.push(["Reserved", `${nodes} from ${clock(j.reservation.at_ms)}`]);
  }
  if (j.placement && j.placement.length) facts.push(["Where", j.placement.map((r) => `${r.node}: GPUs ${r.gpus.join(",")}`).join("; ")]);
  if (j.preemption) facts.push(["Giving way to", `#${j.preemption.preemptor}`]);
  const reasons = (j.reasons || []).map((r) => el("li", {}, el("code", { text: r.code }), " ", r.message));
  const events = detail.events.map((e) => el("tr", {},
    el("td", { text: clock(e.at_ms) }), el("td", { text: e.kind }), el("td", { text: e.reason || "" }), el("td", { text: e.message })));
  const pre = document.querySelector("#view pre.log");
  const scrolled = pre ? pre.scrollTop : null;
  show(el("section", { "aria-labelledby": "job-title" },
    el("h2", { id: "job-title", text: `${j.name} (#${j.id})` }),
    el("p", {}, el("a", { href: "#/queues", "data-key": "back" }, "Back to the queues"), " ", listed ? cancelButton(listed) : null),
    el("dl", { class: "facts" }, facts.map(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })])),
    reasons.length ? [el("h3", { text: "Why it waits" }), el("ul", { id: "reasons" }, reasons)] : null,
    table("Events", [["Time"], ["Event"], ["Reason"], ["Message"]], events, "events"),
    el("h3", { text: "Log (last 100 lines)" }),
    state.snapshot && state.snapshot.driver === "server"
      ? el("pre", { class: "log", tabindex: 0, "aria-label": "Log", "data-key": "log", text: log || "(empty)" })
      : el("p", { text: "In Kubernetes, read the pods' logs with kubectl logs." })));
  const again = document.querySelector("#view pre.log");
  if (again) again.scrollTop = scrolled === null ? again.scrollHeight : scrolled;
}

// ---- routes and start ---------------------------------------------------------------------

function parseRoute() {
  const hash = location.hash || "#/cluster";
  const job = hash.match(/^#\/jobs\/(\d+)$/);
  if (job) return { view: "job", id: Number(job[1]) };
  const view = hash.replace(/^#\//, "");
  return { view: ["cluster", "queues", "quotas"].includes(view) ? view : "cluster" };
}

// `fairway ui` links carry the token in the fragment (never sent to the server): keep it in
// this tab and take it out of the address bar and the history. True if the link had one.
function takeTokenFromLink() {
  const fromLink = location.hash.match(/^#token=([A-Za-z0-9_]+)$/);
  if (!fromLink) return false;
  sessionStorage.setItem(TOKEN_KEY, fromLink[1]);
  state.token = fromLink[1];
  state.snapshot = null;
  history.replaceState(null, "", `${location.pathname}#/cluster`);
  document.getElementById("login").hidden = true;
  return true;
}

function onRoute() {
  const signedIn = takeTokenFromLink();
  state.route = parseRoute();
  if (signedIn) refresh();
  else render();
  document.getElementById("main").focus({ preventScroll: true });
}

function start() {
  takeTokenFromLink();
  state.token = sessionStorage.getItem(TOKEN_KEY);
  state.route = parseRoute();
  window.addEventListener("hashchange", onRoute);
  document.getElementById("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("token");
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    state.token = input.value.trim();
    input.value = "";
    document.getElementById("login").hidden = true;
    refresh();
  });
  refresh();
}

document.addEventListener("DOMContentLoaded", start);
