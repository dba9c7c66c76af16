// Approvals, task graphs, the catalog and stats.
import { api, el, flash, statusBadge, cost, when, seconds, pretty, short, table, debounce } from "./dom.js";
import { drawDag, barChart } from "./graph.js";

export async function approvalsPage(main) {
  const list = el("div", { class: "approvals", "data-testid": "approvals" });
  main.replaceChildren(el("h1", { text: "Approvals" }),
    el("p", { text: "Tool calls waiting for a person. Deciding needs an admin token." }), list);
  const shown = new Set();

  async function load() {
    let reply;
    try { reply = await api("/api/approvals"); } catch (exc) { flash(exc.message); return; }
    const keys = new Set(reply.waiting.map((w) => `${w.run.id}/${w.tool_call.tool_call_id}`));
    // Cards being typed into stay; decided ones go.
    for (const card of [...list.children]) if (!keys.has(card.dataset.key)) card.remove();
    for (const { run, tool_call: call } of reply.waiting) {
      const key = `${run.id}/${call.tool_call_id}`;
      if (shown.has(key) && list.querySelector(`[data-key="${CSS.escape(key)}"]`)) continue;
      shown.add(key);
      list.append(approvalCard(run, call, key, load));
    }
    list.querySelector("[data-testid=empty]")?.remove();
    list.querySelector("[data-testid=more]")?.remove();
    if (!reply.waiting.length) list.replaceChildren(el("p", { "data-testid": "empty", text: "nothing waits for approval" }));
    if (reply.more) list.append(el("p", { "data-testid": "more", class: "muted", text: "more calls wait: decide these to see them" }));
  }
  await load();
  const timer = setInterval(() => { if (!document.hidden) load(); }, 3000);
  return () => clearInterval(timer);
}

function approvalCard(run, call, key, reload) {
  const reasonId = `reason-${key.replace(/[^a-zA-Z0-9]/g, "-")}`;
  const reason = el("input", { id: reasonId, name: "reason" });
  const decide = (decision) => async () => {
    try {
      await api(`/api/runs/${encodeURIComponent(run.id)}/calls/${encodeURIComponent(call.tool_call_id)}/decision`,
        { method: "POST", body: { decision, reason: reason.value, request_id: crypto.randomUUID() } });
      flash(`${call.tool_name}: ${decision === "approve" ? "approved" : "rejected"}`);
      await reload();
    } catch (exc) { flash(exc.message); }
  };
  return el("article", { class: "card", "data-testid": "approval", dataset: { key, tool: call.tool_name } },
    el("h2", {}, call.tool_name, " ", el("span", { class: "muted", text: `step ${call.step}, since ${when(call.create_time)}` })),
    el("p", {}, "run ", el("a", { href: `#/runs/${encodeURIComponent(run.id)}`, text: run.id }), ` of ${run.agent_name}`),
    el("pre", { class: "content", "data-testid": "arguments", text: pretty(call.input) }),
    el("label", { for: reasonId, text: "Reason (the model reads it; needed to reject)" }), reason,
    el("div", { class: "actions" },
      el("button", { type: "button", text: "Approve", on: { click: decide("approve") } }),
      el("button", { type: "button", class: "danger", text: "Reject", on: { click: decide("reject") } })));
}

export async function graphsPage(main) {
  const reply = await api("/api/graphs");
  const file = el("input", { id: "dag-file", type: "file", accept: ".yaml,.yml,.json" });
  const text = el("textarea", { id: "dag-text", rows: 8, placeholder: "title: ...\ntasks:\n  - key: a\n    title: ..." });
  file.addEventListener("change", async () => { if (file.files[0]) text.value = await file.files[0].text(); });
  const requestId = crypto.randomUUID();
  const form = el("form", { class: "card", "aria-labelledby": "dag-title" },
    el("h2", { id: "dag-title", text: "New task graph from a DAG file" }),
    el("label", { for: "dag-file", text: "DAG file (YAML, as agentfleet dag submit reads)" }), file,
    el("label", { for: "dag-text", text: "or its text" }), text,
    el("button", { type: "submit", text: "Create graph" }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const created = await api("/api/graphs", { method: "POST", body: { dag: text.value, request_id: requestId } });
      location.hash = `#/graphs/${encodeURIComponent(created.task_graph.id)}`;
    } catch (exc) { flash(exc.message); }
  });
  main.replaceChildren(el("h1", { text: "Task graphs" }),
    table(["graph", "title", "status", "tasks", "created"], reply.task_graphs.map((graph) =>
      el("tr", { "data-testid": "graph-row" },
        el("td", {}, el("a", { href: `#/graphs/${encodeURIComponent(graph.id)}`, text: graph.id.slice(0, 8) })),
        el("td", { text: graph.title }), el("td", {}, statusBadge(graph.status)),
        el("td", { text: Object.entries(graph.counts || {}).filter(([, n]) => Number(n)).map(([k, n]) => `${k} ${n}`).join(", ") }),
        el("td", { text: when(graph.create_time) })))),
    form);
}

export async function graphPage(main, graphId) {
  const heading = el("h1");
  const picture = el("div", { class: "dag", "data-testid": "dag" });
  const detail = el("section", { class: "detail", "aria-live": "polite", "data-testid": "task-detail" });
  const tasks = el("tbody");
  main.replaceChildren(heading, picture, detail, el("h2", { text: "Tasks" }),
    table(["task", "title", "status", "attempts", "agent", "last run"], [tasks], { "data-testid": "tasks" }));
  let source = null;

  async function load() {
    const { task_graph: graph } = await api(`/api/graphs/${encodeURIComponent(graphId)}`);
    heading.replaceChildren(`Task graph ${graph.title || graph.id} `, el("span", { "data-testid": "graph-status" }, statusBadge(graph.status)));
    picture.replaceChildren(drawDag(graph.tasks, graph.edges, pick));
    tasks.replaceChildren(...graph.tasks.map((task) => el("tr", {},
      el("td", {}, el("button", { type: "button", class: "link", text: task.spec.key, on: { click: () => pick(task) } })),
      el("td", { text: task.spec.title }), el("td", {}, statusBadge(task.status)),
      el("td", { text: task.attempts }), el("td", { text: task.spec.assigned_agent || "(selected)" }),
      el("td", {}, task.last_run_id ? el("a", { href: `#/runs/${encodeURIComponent(task.last_run_id)}`, text: task.last_run_id.slice(0, 8) }) : ""))));
    return graph;
  }
  // A task's sessions: each attempt, who chose its agent and why, and the run behind it.
  async function pick(task) {
    detail.replaceChildren(el("h2", { text: task.spec.title || task.spec.key }),
      el("p", {}, statusBadge(task.status), ` attempts ${task.attempts}`),
      task.summary && el("pre", { class: "content", text: task.summary }),
      task.error_message && el("p", { class: "error", text: task.error_message }));
    try {
      const reply = await api(`/api/graphs/${encodeURIComponent(graphId)}/sessions?task_id=${encodeURIComponent(task.id)}`);
      detail.append(table(["attempt", "agent", "chosen by", "outcome", "run"], reply.task_sessions.map((s) =>
        el("tr", { "data-testid": "session-row" }, el("td", { text: s.attempt }), el("td", { text: s.agent_name }),
          el("td", { text: `${short(s.chosen_by).replace("selection_method_", "")} ${s.reason || ""}` }),
          el("td", { text: short(s.outcome).replace("session_outcome_", "") }),
          el("td", {}, s.run_id ? el("a", { href: `#/runs/${encodeURIComponent(s.run_id)}`, text: s.run_id.slice(0, 8) }) : "")))));
    } catch (exc) { flash(exc.message); }
  }

  try { await load(); } catch (exc) {
    heading.textContent = "Task graph not found";
    picture.replaceChildren(el("p", { class: "error", "data-testid": "error", text: exc.message }));
    return () => {};
  }
  const reload = debounce(() => load().catch((exc) => flash(exc.message)), 200);
  source = new EventSource(`/api/graphs/${encodeURIComponent(graphId)}/events`);
  source.addEventListener("message", reload);
  source.addEventListener("end", () => { source.close(); reload(); });
  source.addEventListener("failed", (m) => { source.close(); flash(JSON.parse(m.data).message); });
  source.addEventListener("error", () => source.close());
  return () => source.close();
}

export async function catalogPage(main) {
  const reply = await api("/api/catalog");
  const section = (title, part, key, headers, row) => {
    const data = reply[part];
    if (data.error) return [el("h2", { text: title }), el("p", { class: "muted", text: `${data.error.code}: ${data.error.message}` })];
    return [el("h2", { text: title }), table(headers, (data[key] || []).map(row), { "data-testid": part })];
  };
  const unavailable = (reply.tools.unavailable_servers || []);
  main.replaceChildren(el("h1", { text: "Agents and tools" }),
    ...section("Agents", "agents", "agent_definitions", ["name", "visibility", "model", "tools", "description"], (a) =>
      el("tr", {}, el("td", { text: a.name }), el("td", { text: short(a.visibility) }),
        el("td", { text: a.model?.name || "" }), el("td", { text: (a.tools || []).join(", ") }), el("td", { text: a.description }))),
    ...section("Products", "products", "products", ["name", "version", "agents"], (p) =>
      el("tr", {}, el("td", { text: p.name }), el("td", { text: p.version || "" }), el("td", { text: (p.agent_names || []).join(", ") }))),
    ...section("Tools", "tools", "tools", ["name", "source", "description"], (t) =>
      el("tr", {}, el("td", { text: t.name }), el("td", { text: t.source?.mcp_server || short(t.source?.kind) || "" }), el("td", { text: t.description }))),
    // Spread, not a null: replaceChildren would show a null as the text "null".
    ...(unavailable.length ? [el("p", { class: "error", text: `unavailable MCP servers: ${unavailable.map((u) => `${u.name} (${u.error || ""})`).join(", ")}` })] : []),
    ...section("MCP servers", "mcp_servers", "mcp_servers", ["name", "transport", "url or command", "breaker", "session", "last success", "last failure", "last error"], mcpServerRow),
    ...section("Secrets (names only)", "secrets", "secrets", ["name", "updated"], (s) =>
      el("tr", {}, el("td", { text: s.name }), el("td", { text: when(s.update_time) }))));
}

// A server's health as the toolpool replica that answered has seen it (McpServer.health).
function mcpServerRow(server) {
  const health = server.health || {};
  const breaker = short(health.breaker) || "closed";
  const failures = Number(health.consecutive_failures || 0);
  return el("tr", { "data-testid": "mcp-server", dataset: { name: server.name, breaker } },
    el("td", { text: server.name }), el("td", { text: short(server.transport) }),
    el("td", { text: server.url || [server.command, ...(server.args || [])].join(" ") }),
    el("td", {}, el("span", { class: `status s-breaker-${breaker}`, "data-testid": "breaker", text: breaker.replace("_", "-") }),
      failures ? ` ${failures} failure(s) in a row` : "",
      health.retry_after ? ` (retry in ${seconds(health.retry_after).toFixed(0)} s)` : ""),
    el("td", { text: health.connected ? "connected" : "none" }),
    el("td", { text: when(health.last_success_time) || "—" }),
    el("td", { text: when(health.last_failure_time) || "—" }),
    el("td", { class: "preview", "data-testid": "last-error", title: health.last_error || "", text: health.last_error || "" }));
}

// Latency rows (p50, p95 in seconds) of the entries that measured any; label each.
function latencyRows(entries, label, p50, p95) {
  return entries.filter((s) => s[p50]).map((s) => ({ label: label(s), values: [seconds(s[p50]), seconds(s[p95])] }));
}

export async function statsPage(main) {
  const reply = await api("/api/stats?days=7");
  const stats = reply.stats || [];
  const rows = stats.map((s) => ({ label: s.agent_name, values: [Number(s.completed), Number(s.failed)] }));
  const days = reply.days || [];
  const total = (day, field) => day.stats.reduce((sum, s) => sum + Number(s[field] || 0), 0);
  // Per day and agent: GetAgentStats of one day each gives each agent's percentiles.
  const daily = days.flatMap((d) => d.stats.map((s) => ({ ...s, day: d.day })));
  const latency = (testid, title, p50, p95) => el("section", { "data-testid": testid },
    el("h2", { text: `${title} per agent (p50, p95, seconds)` }),
    barChart(latencyRows(stats, (s) => s.agent_name, p50, p95), ["p50", "p95"]),
    el("h3", { text: `${title} per day and agent (p50, p95, seconds)` }),
    barChart(latencyRows(daily, (s) => `${s.day.slice(5)} ${s.agent_name}`, p50, p95), ["p50", "p95"]));
  const secs = (duration) => (duration ? `${seconds(duration).toFixed(2)} s` : "—");
  main.replaceChildren(el("h1", { text: "Stats, last 7 days" }),
    el("h2", { text: "Runs per day (completed, failed)" }),
    barChart(days.map((d) => ({ label: d.day, values: [total(d, "completed"), total(d, "failed")] })), ["completed", "failed"]),
    el("h2", { text: "Tokens and cost per day" }),
    barChart(days.map((d) => ({ label: d.day, values: [total(d, "tokens_in") + total(d, "tokens_out")] })), ["tokens"]),
    barChart(days.map((d) => ({ label: d.day, values: [total(d, "cost_nanos") / 1e9] })), ["cost (USD)"]),
    el("h2", { text: "Runs per agent (completed, failed)" }), barChart(rows, ["completed", "failed"]),
    el("h2", { text: "Tokens per agent" }), barChart(stats.map((s) => ({ label: s.agent_name, values: [Number(s.tokens_in) + Number(s.tokens_out)] })), ["tokens"]),
    el("h2", { text: "Cost per agent (USD)" }), barChart(stats.map((s) => ({ label: s.agent_name, values: [Number(s.cost_nanos) / 1e9] })), ["cost"]),
    latency("step-latency", "Step latency", "p50_step_duration", "p95_step_duration"),
    latency("model-latency", "Model-call latency", "p50_model_call_duration", "p95_model_call_duration"),
    table(["agent", "runs", "failed", "success", "p50", "p95", "mean steps", "p50 step", "p50 model call", "cost"], stats.map((s) =>
      el("tr", { dataset: { agent: s.agent_name } }, el("td", { text: s.agent_name }), el("td", { text: s.total_runs }), el("td", { text: s.failed }),
        el("td", { text: `${(100 * s.success_rate).toFixed(0)} %` }), el("td", { text: `${seconds(s.p50_duration).toFixed(1)} s` }),
        el("td", { text: `${seconds(s.p95_duration).toFixed(1)} s` }), el("td", { text: Number(s.mean_steps).toFixed(1) }),
        el("td", { "data-testid": "p50-step", text: secs(s.p50_step_duration) }),
        el("td", { "data-testid": "p50-model", text: secs(s.p50_model_call_duration) }),
        el("td", { text: cost(s.cost_nanos) }))), { "data-testid": "stats" }));
}
