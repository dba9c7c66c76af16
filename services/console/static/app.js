// The console's router: a view per hash route, each returning a cleanup that closes its live
// streams and timers when the page moves on.
import { api, el, flash, setCsrf, statusBadge, cost, when, table, ApiError } from "./dom.js";
import { runPage } from "./run.js";
import { approvalsPage, graphsPage, graphPage, catalogPage, statsPage } from "./views.js";

const main = document.getElementById("main");
let session = null;
let cleanup = () => {};

function show(...children) {
  main.replaceChildren(...children);
}

async function route() {
  cleanup();
  cleanup = () => {};
  flash("");
  const hash = location.hash || "#/runs";
  if (hash.startsWith("#/signin")) {
    await signInFromLink(hash);
    return;
  }
  if (!session) {
    try {
      const reply = await api("/api/session");
      signedIn(reply);
    } catch {
      signInPage();
      return;
    }
  }
  const [, section, id] = hash.slice(1).split("/").map(decodeURIComponent);
  const views = {
    runs: () => (id ? runPage(main, id) : runsPage()),
    start: () => startPage(),
    approvals: () => approvalsPage(main),
    graphs: () => (id ? graphPage(main, id) : graphsPage(main)),
    catalog: () => catalogPage(main),
    stats: () => statsPage(main),
  };
  const view = views[section] || views.runs;
  try {
    cleanup = (await view()) || (() => {});
  } catch (exc) {
    show(el("h1", { text: "Something went wrong" }), el("p", { class: "error", "data-testid": "error", text: exc.message }));
  }
}

function signedIn(reply) {
  session = reply;
  setCsrf(reply.csrf_token);
  document.getElementById("nav").hidden = false;
  document.getElementById("signout").hidden = false;
  document.getElementById("who").textContent = `project ${reply.project_id}`;
}

function signedOut() {
  session = null;
  setCsrf("");
  document.getElementById("nav").hidden = true;
  document.getElementById("signout").hidden = true;
  document.getElementById("who").textContent = "";
}

// A sign-in link (printed by `agentfleet up --demo`) carries the project and token in the
// fragment, which never reaches a server log; it is removed from the address bar at once.
// It only fills the form: signing in stays a click, so a link someone else sends cannot
// quietly sign this browser in to their project (where what you type would be theirs).
async function signInFromLink(hash) {
  const query = new URLSearchParams(hash.split("?")[1] || "");
  history.replaceState(null, "", "#/runs");
  signInPage(query.get("project") || "", query.get("token") || "");
}

async function submitSignIn(projectId, token) {
  try {
    signedIn(await api("/api/session", { method: "POST", body: { project_id: projectId, token } }));
    if (!location.hash || location.hash.startsWith("#/signin")) location.hash = "#/runs";
    await route();
  } catch (exc) {
    signInPage();
    flash(exc.message);
  }
}

function signInPage(projectId = "", tokenValue = "") {
  signedOut();
  const project = el("input", { id: "project", name: "project", required: true, autocomplete: "username", value: projectId });
  const token = el("input", { id: "token", name: "token", type: "password", required: true, autocomplete: "current-password" });
  token.value = tokenValue;
  const form = el("form", { class: "card signin", "aria-labelledby": "signin-title" },
    el("h1", { id: "signin-title", text: "Sign in" }),
    el("p", { text: "With a project token (agentfleet admin token create). A member token reads; an admin token may also approve." }),
    el("label", { for: "project", text: "Project" }), project,
    el("label", { for: "token", text: "Token" }), token,
    el("button", { type: "submit", text: "Sign in" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    submitSignIn(project.value.trim(), token.value);
  });
  show(form);
}

document.getElementById("signout").addEventListener("click", async () => {
  cleanup();  // first: no live view or timer calls on with the session being ended
  cleanup = () => {};
  try { await api("/api/session", { method: "DELETE" }); } catch { /* already gone */ }
  signInPage();
  history.replaceState(null, "", "#/runs");
});

window.addEventListener("signed-out", () => { if (session) { session = null; signInPage(); } });

// ListRunsRequest.started_by's values: what started a run (rpc, a trigger, a schedule, ...).
const STARTED_BY = ["", "rpc", "trigger", "schedule", "event", "parent", "task"];
const STATUSES = ["", "queued", "running", "waiting", "paused", "completed", "failed", "cancelled"];

function runsPage() {
  const params = new URLSearchParams(location.hash.split("?")[1] || "");
  const status = el("select", { id: "f-status", name: "status" },
    STATUSES.map((s) => el("option", { value: s, text: s || "any", selected: params.get("status") === s })));
  const agent = el("input", { id: "f-agent", name: "agent", value: params.get("agent") || "" });
  const startedBy = el("select", { id: "f-started-by", name: "started_by" },
    STARTED_BY.map((s) => el("option", { value: s, text: s || "any", selected: params.get("started_by") === s })));
  const label = el("input", { id: "f-label", name: "label", placeholder: "key=value", value: params.get("label") || "" });
  const after = el("input", { id: "f-after", name: "after", type: "datetime-local", value: params.get("after") || "" });
  const before = el("input", { id: "f-before", name: "before", type: "datetime-local", value: params.get("before") || "" });
  const children = el("input", { id: "f-children", name: "children", type: "checkbox" });
  const body = el("tbody");
  const more = el("button", { type: "button", text: "Next page", hidden: true });
  const live = el("span", { class: "live", text: "live" });
  let pageToken = "";
  let tokens = [];

  async function load() {
    const query = new URLSearchParams({ page_size: "25", top_level: children.checked ? "false" : "true" });
    if (status.value) query.set("status", status.value);
    if (agent.value) query.set("agent", agent.value.trim());
    if (label.value) query.set("label", label.value.trim());
    if (startedBy.value) query.set("started_by", startedBy.value);
    if (after.value) query.set("after", after.value);
    if (before.value) query.set("before", before.value);
    if (pageToken) query.set("page_token", pageToken);
    try {
      const reply = await api(`/api/runs?${query}`);
      body.replaceChildren(...reply.runs.map(runRow));
      if (!reply.runs.length) body.append(el("tr", {}, el("td", { colspan: 8, text: "no runs match" })));
      more.hidden = !reply.next_page_token;
      more.dataset.next = reply.next_page_token;
    } catch (exc) {
      if (!(exc instanceof ApiError && exc.status === 401)) flash(exc.message);
    }
  }
  more.addEventListener("click", () => { tokens.push(pageToken); pageToken = more.dataset.next; load(); });
  const form = el("form", { class: "filters", "aria-label": "Filters" },
    el("label", { for: "f-status", text: "Status" }), status,
    el("label", { for: "f-agent", text: "Agent" }), agent,
    el("label", { for: "f-label", text: "Labels" }), label,
    el("label", { for: "f-started-by", text: "Started by" }), startedBy,
    el("label", { for: "f-after", text: "Created after" }), after,
    el("label", { for: "f-before", text: "before" }), before,
    el("label", { for: "f-children", text: "Include child runs" }), children,
    el("button", { type: "submit", text: "Filter" }));
  form.addEventListener("submit", (event) => { event.preventDefault(); pageToken = ""; tokens = []; load(); });
  show(el("h1", {}, "Runs ", live), form,
    table(["run", "agent", "input", "status", "steps", "tokens", "cost", "created"], [body], { "data-testid": "runs" }), more);
  load();
  // ListRuns has no watch: the first page is read again every 3 s while it is shown.
  const timer = setInterval(() => { if (!pageToken && !document.hidden) load(); }, 3000);
  return () => clearInterval(timer);
}

function runRow(run) {
  return el("tr", { "data-testid": "run-row", dataset: { runId: run.id } },
    el("td", {}, el("a", { href: `#/runs/${encodeURIComponent(run.id)}`, text: run.id.slice(0, 8) })),
    el("td", { text: run.agent_name }),
    el("td", { class: "preview", text: run.input_preview }),
    el("td", {}, statusBadge(run.status)),
    el("td", { text: run.total_steps }),
    el("td", { text: Number(run.tokens_in) + Number(run.tokens_out) }),
    el("td", { text: cost(run.cost_nanos) }),
    el("td", { text: when(run.create_time) }));
}

async function startPage() {
  const agents = el("datalist", { id: "agent-names" });
  const agent = el("input", { id: "s-agent", name: "agent", list: "agent-names", required: true });
  const input = el("textarea", { id: "s-input", name: "input", rows: 6, required: true });
  const labels = el("input", { id: "s-labels", name: "labels", placeholder: "key=value, key2=value2" });
  const requestId = crypto.randomUUID();
  const form = el("form", { class: "card", "aria-labelledby": "start-title" },
    el("h1", { id: "start-title", text: "Start a run" }),
    el("label", { for: "s-agent", text: "Agent" }), agent, agents,
    el("label", { for: "s-input", text: "Input" }), input,
    el("label", { for: "s-labels", text: "Labels (optional)" }), labels,
    el("button", { type: "submit", text: "Start" }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const pairs = {};
    for (const part of labels.value.split(",").map((p) => p.trim()).filter(Boolean)) {
      const at = part.indexOf("=");
      if (at < 1) { flash(`labels: ${part} is not key=value`); return; }
      pairs[part.slice(0, at).trim()] = part.slice(at + 1).trim();
    }
    try {
      const reply = await api("/api/runs", {
        method: "POST", body: { agent_name: agent.value.trim(), input: input.value, labels: pairs, request_id: requestId },
      });
      location.hash = `#/runs/${encodeURIComponent(reply.run.id)}`;
    } catch (exc) {
      flash(exc.message);
    }
  });
  show(form);
  try {
    const catalog = await api("/api/catalog");
    for (const definition of catalog.agents.agent_definitions || []) {
      agents.append(el("option", { value: definition.name }));
    }
  } catch { /* the names are a convenience */ }
}

window.addEventListener("hashchange", route);
route();
