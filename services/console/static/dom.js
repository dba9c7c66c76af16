// DOM and API helpers. Everything shown came from tenants and models: it is set with
// textContent (or as attribute values), never parsed as HTML.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "on") {
      for (const [type, fn] of Object.entries(value)) node.addEventListener(type, fn);
    } else if (key === "text") {
      node.textContent = String(value);
    } else if (key === "dataset") {
      Object.assign(node.dataset, value);
    } else {
      node.setAttribute(key, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const SVG = "http://www.w3.org/2000/svg";
export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "text") node.textContent = String(value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) if (child) node.append(child);
  return node;
}

let csrfToken = "";
export function setCsrf(token) { csrfToken = token; }

export class ApiError extends Error {
  constructor(status, code, message) {
    super(`${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

export async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET") {
    init.headers["content-type"] = "application/json";
    init.headers["x-csrf-token"] = csrfToken;
    init.body = JSON.stringify(body ?? {});
  }
  const reply = await fetch(path, init);
  let data = {};
  try { data = await reply.json(); } catch { data = {}; }
  if (!reply.ok) {
    if (reply.status === 401 && path !== "/api/session") window.dispatchEvent(new Event("signed-out"));
    throw new ApiError(reply.status, data.code || String(reply.status), data.message || reply.statusText);
  }
  return data;
}

export function flash(message) {
  const box = document.getElementById("flash");
  box.textContent = message;
  box.hidden = !message;
}

export const short = (value) => (value || "").replace(/^(RUN_STATUS_|TOOL_CALL_STATUS_|TASK_STATUS_|TASK_GRAPH_STATUS_|RUN_EVENT_TYPE_|VISIBILITY_|MESSAGE_ROLE_|TOOL_SOURCE_KIND_|MCP_TRANSPORT_|MCP_BREAKER_STATE_)/, "").toLowerCase();

export function statusBadge(status) {
  const name = short(status);
  return el("span", { class: `status s-${name}`, "data-testid": "status", text: name });
}

export function cost(nanos) {
  const value = Number(nanos || 0) / 1e9;
  return `$${value.toFixed(value < 0.01 ? 6 : 4)}`;
}

export function when(stamp) {
  if (!stamp) return "";
  const date = new Date(stamp);
  return Number.isNaN(date.getTime()) ? String(stamp) : date.toLocaleString();
}

export function seconds(duration) {
  // proto3 JSON durations are "1.500s"
  return duration ? parseFloat(String(duration)) : 0;
}

export function pretty(value) {
  return JSON.stringify(value ?? null, null, 2);
}

// rows: an array of <tr>, or one <tbody> the caller keeps to refill.
export function table(headers, rows, attrs = {}) {
  const body = rows.length === 1 && rows[0].tagName === "TBODY" ? rows[0] : el("tbody", {}, rows);
  return el("table", attrs,
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col", text: h })))),
    body);
}

// A debounced refresher: many events in a burst cost one reload.
export function debounce(fn, ms = 250) {
  let timer = null;
  return () => {
    clearTimeout(timer);
    timer = setTimeout(fn, ms);
  };
}
