// A run's page: its live tree (GetRunTree, read again on every event of one WatchRun
// include_descendants stream, which carries the events of the run and of every run below
// it, so a child's steps and tool calls show as they happen), the event timeline as a
// waterfall, messages and tool calls with full content on demand, and the cancel and resume
// buttons.
import { api, el, flash, statusBadge, cost, when, seconds, pretty, short, table, debounce } from "./dom.js";

const TERMINAL = new Set(["completed", "failed", "cancelled"]);

export async function runPage(main, runId) {
  const header = el("section", { "aria-label": "Run" });
  const tree = el("ul", { class: "tree", "data-testid": "tree" });
  const timeline = el("ol", { class: "timeline", "data-testid": "timeline" });
  const calls = el("tbody");
  const messages = el("tbody");
  const detail = el("section", { class: "detail", "aria-live": "polite", "data-testid": "detail" });
  // What the run is doing now: the tool calls it has asked for and not had answered.
  const now = el("p", { class: "waiting", "aria-live": "polite", "data-testid": "now" });
  let source = null;
  // Per run of the tree, from the stream: the tool calls asked for and not yet answered
  // (run id -> call id -> tool name), and the runs that have finished.
  const pending = new Map();
  const finished = new Set();
  const callingIn = (id) => (finished.has(id) ? [] : [...(pending.get(id)?.values() || [])]);

  main.replaceChildren(
    header, now,
    el("h2", { text: "Run tree" }), tree,
    el("h2", { text: "Tool calls" }),
    table(["call", "tool", "status", "duration", "step", ""], [calls], { "data-testid": "calls" }),
    el("h2", { text: "Messages" }),
    table(["seq", "role", "agent", "preview", ""], [messages], { "data-testid": "messages" }),
    detail,
    el("h2", { text: "Event timeline" }), timeline,
  );

  async function refresh() {
    let reply;
    try {
      reply = await api(`/api/runs/${encodeURIComponent(runId)}`);
    } catch (exc) {
      header.replaceChildren(el("h1", { text: "Run not found" }),
        el("p", { class: "error", "data-testid": "error", text: exc.message }));
      tree.replaceChildren();
      if (source) source.close();
      return false;
    }
    renderHeader(reply.run);
    const [treeReply, callReply, messageReply] = await Promise.all([
      api(`/api/runs/${encodeURIComponent(runId)}/tree`),
      api(`/api/runs/${encodeURIComponent(runId)}/calls`),
      api(`/api/runs/${encodeURIComponent(runId)}/messages`),
    ]);
    renderTree(treeReply);
    calls.replaceChildren(...callReply.tool_calls.map(callRow));
    messages.replaceChildren(...messageReply.messages.map(messageRow));
    return true;
  }

  function renderHeader(run) {
    const status = short(run.status);
    const cancel = el("button", { type: "button", text: "Cancel run", disabled: TERMINAL.has(status) });
    const resume = el("button", { type: "button", text: "Resume", disabled: status !== "paused" && status !== "failed" && status !== "cancelled" });
    cancel.addEventListener("click", async () => {
      try { await api(`/api/runs/${encodeURIComponent(runId)}/cancel`, { method: "POST", body: {} }); await refresh(); }
      catch (exc) { flash(exc.message); }
    });
    resume.addEventListener("click", async () => {
      try {
        await api(`/api/runs/${encodeURIComponent(runId)}/resume`, { method: "POST", body: { request_id: crypto.randomUUID() } });
        watch();
      } catch (exc) { flash(exc.message); }
    });
    const answer = run.output && Object.keys(run.output).length ? pretty(run.output) : run.summary;
    header.replaceChildren(
      el("h1", {}, `Run of ${run.agent_name} `, el("span", { "data-testid": "run-status" }, statusBadge(run.status))),
      el("dl", { class: "facts" },
        el("dt", { text: "run" }), el("dd", { text: run.id }),
        el("dt", { text: "trace id" }), el("dd", { "data-testid": "trace-id", text: run.trace_id || "—" }),
        el("dt", { text: "created" }), el("dd", { text: when(run.create_time) }),
        el("dt", { text: "steps" }), el("dd", { text: run.total_steps }),
        el("dt", { text: "tokens" }), el("dd", { text: `${run.tokens_in} in, ${run.tokens_out} out` }),
        el("dt", { text: "cost" }), el("dd", { text: cost(run.cost_nanos) }),
        el("dt", { text: "labels" }), el("dd", { "data-testid": "labels", text: Object.entries(run.labels || {}).sort().map(([k, v]) => `${k}=${v}`).join(", ") || "—" }),
        run.parent_run_id && el("dt", { text: "parent" }),
        run.parent_run_id && el("dd", {}, el("a", { href: `#/runs/${encodeURIComponent(run.parent_run_id)}`, text: run.parent_run_id }))),
      el("h2", { text: "Input" }), el("pre", { class: "content", text: run.input }),
      answer && el("h2", { text: "Answer" }),
      answer && el("pre", { class: "content", "data-testid": "answer", text: answer }),
      run.error_message && el("p", { class: "error", "data-testid": "run-error", text: run.error_message }),
      el("div", { class: "actions" }, cancel, resume));
  }

  function renderTree(reply) {
    const byParent = new Map();
    for (const node of reply.nodes) {
      const key = node.run_id === reply.root_run_id ? "" : node.parent_run_id;
      if (!byParent.has(key)) byParent.set(key, []);
      byParent.get(key).push(node);
    }
    const branch = (parent) => (byParent.get(parent) || []).map((node) => {
      const waiting = node.waiting_for && node.waiting_for.message;
      // A run a trigger, schedule or event started says so, with the trigger that fired.
      const triggered = ["trigger", "schedule", "event"].includes(node.started_by)
        ? ` started by ${node.started_by} ${(node.trigger_origin && node.trigger_origin.trigger) || ""}` : "";
      const tools = TERMINAL.has(short(node.status)) ? [] : callingIn(node.run_id);
      const children = branch(node.run_id);
      return el("li", { "data-testid": "tree-node", dataset: { runId: node.run_id, status: short(node.status) } },
        el("a", { href: `#/runs/${encodeURIComponent(node.run_id)}`, text: node.agent_name }), " ",
        statusBadge(node.status),
        el("span", { class: "muted", text: ` step ${node.step_count}/${node.total_steps} · ${Number(node.tokens_in) + Number(node.tokens_out)} tokens · ${cost(node.cost_nanos)} · ${seconds(node.duration).toFixed(1)} s` }),
        waiting && el("span", { class: "waiting", text: ` waiting: ${waiting}` }),
        triggered && el("span", { class: "muted", "data-testid": "tree-trigger", text: triggered }),
        tools.length ? el("span", { class: "waiting", "data-testid": "node-calling", text: ` calling ${tools.join(", ")}` }) : null,
        node.summary_preview && el("div", { class: "preview", text: node.summary_preview }),
        children.length ? el("ul", {}, children) : null);
    });
    tree.replaceChildren(...branch(""));
  }

  function callRow(call) {
    const open = el("button", { type: "button", text: "Full content", "aria-label": `Full content of ${call.tool_name}` });
    open.addEventListener("click", async () => {
      try {
        const reply = await api(`/api/runs/${encodeURIComponent(call.run_id)}/calls/${encodeURIComponent(call.tool_call_id)}`);
        const full = reply.tool_call;
        detail.replaceChildren(el("h2", { text: `Tool call ${full.tool_name} (${full.tool_call_id})` }),
          el("h3", { text: "Input" }), el("pre", { class: "content", "data-testid": "call-input", text: pretty(full.input) }),
          el("h3", { text: "Output" }), el("pre", { class: "content", "data-testid": "call-output", text: pretty(full.output) }),
          full.error && el("p", { class: "error", text: full.error }));
        detail.scrollIntoView();
      } catch (exc) { flash(exc.message); }
    });
    return el("tr", { "data-testid": "call-row", dataset: { tool: call.tool_name } },
      el("td", { text: call.tool_call_id }), el("td", { text: call.tool_name }),
      el("td", {}, statusBadge(call.status)), el("td", { text: `${seconds(call.duration).toFixed(2)} s` }),
      el("td", { text: call.step }), el("td", {}, open));
  }

  function messageRow(message) {
    const open = el("button", { type: "button", text: "Full content" });
    open.addEventListener("click", async () => {
      try {
        const reply = await api(`/api/runs/${encodeURIComponent(message.run_id)}/messages/${encodeURIComponent(message.id)}`);
        detail.replaceChildren(el("h2", { text: `Message ${message.seq} (${short(message.role)})` }),
          el("pre", { class: "content", "data-testid": "message-content", text: pretty(reply.message.content) }));
        detail.scrollIntoView();
      } catch (exc) { flash(exc.message); }
    });
    return el("tr", { "data-testid": "message-row" },
      el("td", { text: message.seq }), el("td", { text: short(message.role) }),
      el("td", { text: message.agent_name }),
      el("td", { class: "preview", "data-testid": "message-preview", text: message.preview }), el("td", {}, open));
  }

  // The waterfall: each event's bar starts at its time in the run's span and lasts until the
  // next event, a tool request until its response (so a slow tool is a long bar).
  const events = [];
  function addEvent(event) {
    const at = new Date(event.create_time).getTime();
    const kind = short(event.type);
    const payload = Object.keys(event).find((key) => !["run_id", "root_run_id", "parent_run_id", "seq", "agent_name", "type", "is_internal", "create_time", "trace_id"].includes(key));
    const body = payload ? event[payload] : {};
    const bar = el("span", { class: `bar k-${kind}` });
    const offset = el("span", { class: "offset" });
    const row = el("li", { "data-testid": "event", dataset: { type: kind, agent: event.agent_name } },
      offset, el("span", { class: "track" }, bar),
      el("span", { class: "kind", text: kind }), el("span", { class: "muted", text: ` ${event.agent_name} ` }),
      el("span", { class: "preview", text: JSON.stringify(body).slice(0, 300) }));
    const runOf = event.run_id;
    if (kind === "tool_request") {
      if (!pending.has(runOf)) pending.set(runOf, new Map());
      pending.get(runOf).set(body.tool_call_id, body.tool_name);
    } else if (kind === "tool_response") {
      pending.get(runOf)?.delete(body.tool_call_id);
    } else if (kind === "run_finished") {
      finished.add(runOf);
    } else if (kind === "run_started") {
      finished.delete(runOf); // resumed
    }
    events.push({ at, kind, runId: runOf, callId: body.tool_call_id, tool: body.tool_name, bar, offset });
    timeline.append(row);
    layout();
  }

  function layout() {
    // The tree's runs' events interleave as they were stored: a span from the earliest.
    const first = events.reduce((low, item) => Math.min(low, item.at), Infinity);
    const span = Math.max(1, events.reduce((high, item) => Math.max(high, item.at), first) - first);
    events.forEach((item, i) => {
      let end = i + 1 < events.length ? events[i + 1].at : item.at;
      if (item.kind === "tool_request") {
        const response = events.find((other) => other.kind === "tool_response" && other.runId === item.runId && other.callId === item.callId);
        end = response ? response.at : events[events.length - 1].at;
      }
      item.offset.textContent = `+${((item.at - first) / 1000).toFixed(2)} s`;
      item.bar.style.marginLeft = `${(100 * (item.at - first)) / span}%`;
      item.bar.style.width = `${Math.max(0.8, (100 * (end - item.at)) / span)}%`;
      item.bar.title = `${((end - item.at) / 1000).toFixed(2)} s`;
    });
    const tools = callingIn(runId);
    now.textContent = tools.length ? `calling ${tools.join(", ")}` : "";
  }

  // A refresh that fails (signed out meanwhile, a service restarting) says so and goes on.
  const reload = debounce(() => refresh().catch((exc) => flash(exc.message)), 200);

  function watch() {
    if (source) source.close();
    timeline.replaceChildren();
    events.length = 0;
    pending.clear();
    finished.clear();
    // One stream for the whole tree: it ends once the run and every descendant have stopped.
    source = new EventSource(`/api/runs/${encodeURIComponent(runId)}/events?descendants=true`);
    source.addEventListener("message", (message) => { addEvent(JSON.parse(message.data)); reload(); });
    source.addEventListener("end", () => { source.close(); reload(); });
    source.addEventListener("failed", (message) => { source.close(); flash(JSON.parse(message.data).message); });
    // A lost stream is not reopened on its own (it would replay every event again).
    source.addEventListener("error", () => { source.close(); });
  }

  if (await refresh()) watch();
  return () => { if (source) source.close(); };
}
