// A task DAG drawn as SVG (layered: each task one column right of its furthest blocker) and
// horizontal bar charts. Small enough to keep here rather than vendor a layout library.
import { svg, el, short } from "./dom.js";

const W = 170, H = 46, GAP_X = 60, GAP_Y = 24;

export function drawDag(tasks, edges, onPick) {
  const byKey = new Map(tasks.map((t) => [t.spec.key, t]));
  const blockers = new Map(tasks.map((t) => [t.spec.key, []]));
  for (const edge of edges || []) blockers.get(edge.blocked_key)?.push(edge.blocker_key);
  const layer = new Map();
  const depth = (key, seen = new Set()) => {
    if (layer.has(key)) return layer.get(key);
    if (seen.has(key)) return 0; // a cycle cannot be stored; drawn flat if it ever is
    seen.add(key);
    const d = Math.max(-1, ...(blockers.get(key) || []).filter((b) => byKey.has(b)).map((b) => depth(b, seen))) + 1;
    layer.set(key, d);
    return d;
  };
  const columns = [];
  for (const task of tasks) {
    const d = depth(task.spec.key);
    (columns[d] ||= []).push(task);
  }
  const at = new Map();
  columns.forEach((column, x) => column.forEach((task, y) => at.set(task.spec.key, { x: x * (W + GAP_X) + 10, y: y * (H + GAP_Y) + 10 })));
  const width = columns.length * (W + GAP_X) + 20;
  const height = Math.max(...columns.map((c) => c.length), 1) * (H + GAP_Y) + 20;
  const picture = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "aria-label": "Task graph" },
    svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto" },
      svg("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }))));
  for (const edge of edges || []) {
    const from = at.get(edge.blocker_key), to = at.get(edge.blocked_key);
    if (!from || !to) continue;
    picture.append(svg("path", { class: "edge", "marker-end": "url(#arrow)",
      d: `M${from.x + W},${from.y + H / 2} C${from.x + W + GAP_X / 2},${from.y + H / 2} ${to.x - GAP_X / 2},${to.y + H / 2} ${to.x},${to.y + H / 2}` }));
  }
  for (const task of tasks) {
    const { x, y } = at.get(task.spec.key);
    const status = short(task.status);
    const node = svg("g", { class: `task s-${status}`, tabindex: 0, role: "button", "data-testid": "task-node", "data-key": task.spec.key, "data-status": status },
      svg("title", { text: `${task.spec.key}: ${status}` }),
      svg("rect", { x, y, width: W, height: H, rx: 6 }),
      svg("text", { x: x + 8, y: y + 18, text: (task.spec.title || task.spec.key).slice(0, 24) }),
      svg("text", { x: x + 8, y: y + 36, class: "sub", text: `${status} · ${task.attempts} attempt(s)` }));
    node.addEventListener("click", () => onPick(task));
    node.addEventListener("keydown", (event) => { if (event.key === "Enter") onPick(task); });
    picture.append(node);
  }
  return picture;
}

export function barChart(rows, series) {
  if (!rows.length) return el("p", { class: "muted", text: "no data in this window" });
  const max = Math.max(...rows.flatMap((r) => r.values), 1e-9);
  const barH = 14, labelW = 160, plotW = 420;
  const height = rows.length * (barH * series.length + 10) + 10;
  const chart = svg("svg", { viewBox: `0 0 ${labelW + plotW + 90} ${height}`, class: "chart", role: "img", "aria-label": series.join(", ") });
  rows.forEach((row, i) => {
    const top = 5 + i * (barH * series.length + 10);
    chart.append(svg("text", { x: 0, y: top + barH, text: row.label.slice(0, 22) }));
    row.values.forEach((value, j) => {
      const w = Math.max(1, (value / max) * plotW);
      chart.append(svg("rect", { x: labelW, y: top + j * barH, width: w, height: barH - 2, class: `series-${j}` }));
      chart.append(svg("text", { x: labelW + w + 4, y: top + j * barH + barH - 3, class: "sub", text: Number.isInteger(value) ? value : value.toFixed(4) }));
    });
  });
  return chart;
}
