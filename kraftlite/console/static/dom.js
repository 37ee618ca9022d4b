// DOM helpers. Every value from the server is written as text (textContent, attributes),
// never parsed as HTML: record keys and values are attacker-controlled.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  applyAttrs(el, attrs);
  appendAll(el, children);
  return el;
}

function applyAttrs(el, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "on") {
      for (const [event, handler] of Object.entries(value)) el.addEventListener(event, handler);
    } else if (name === "text") {
      el.textContent = String(value);
    } else if (name === "class") {
      el.className = Array.isArray(value) ? value.filter(Boolean).join(" ") : value;
    } else if (name === "value") {
      el.value = value;
    } else if (name === "href") {
      el.setAttribute("href", safeHref(value));
    } else {
      el.setAttribute(name, value === true ? "" : String(value));
    }
  }
}

function appendAll(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// Links are to this console (#/...) or to another node's console over http(s).
function safeHref(value) {
  const text = String(value);
  if (text.startsWith("#/")) return text;
  try {
    const parsed = new URL(text, location.href);
    if (parsed.protocol === "http:" || parsed.protocol === "https:") return parsed.href;
  } catch {
    // fall through
  }
  return "#/";
}

export function replace(el, ...children) {
  el.replaceChildren();
  appendAll(el, children);
}

// --------------------------------------------------------------------------- formatting

export function fmtNum(n) {
  if (n === null || n === undefined) return "—";
  return Number(n).toLocaleString("en-US");
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

export function fmtRate(n, bytes) {
  if (n === null || n === undefined) return "—";
  if (bytes) return fmtBytes(Math.round(n)) + "/s";
  return (n < 10 ? n.toFixed(1) : fmtNum(Math.round(n))) + "/s";
}

export function fmtTime(ms) {
  if (ms === null || ms === undefined) return "—";
  const d = new Date(Number(ms));
  return Number.isNaN(d.getTime()) ? String(ms) : d.toISOString().replace("T", " ").replace("Z", "");
}

// --------------------------------------------------------------------------- bytes

export function base64ToBytes(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

// A key or value shown as JSON (pretty-printed) when it parses, else text when it is UTF-8
// without control characters, else hex.
export function showBytes(b64) {
  if (b64 === null || b64 === undefined) return { kind: "null", text: "null" };
  const bytes = base64ToBytes(b64);
  let text;
  try {
    text = strictUtf8.decode(bytes);
  } catch {
    return { kind: "hex", text: hex(bytes) };
  }
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0008\u000e-\u001f\u007f]/.test(text)) return { kind: "hex", text: hex(bytes) };
  const trimmed = text.trim();
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    try {
      return { kind: "json", text: JSON.stringify(JSON.parse(trimmed), null, 2) };
    } catch {
      // not JSON: text
    }
  }
  return { kind: "text", text };
}

function hex(bytes) {
  const out = [];
  for (const b of bytes.subarray(0, 4096)) out.push(b.toString(16).padStart(2, "0"));
  return out.join(" ") + (bytes.length > 4096 ? " …" : "");
}

// --------------------------------------------------------------------------- widgets

const SVG = "http://www.w3.org/2000/svg";

// A small line chart of `values` (numbers or nulls), newest last.
export function sparkline(values, { width = 160, height = 36, label = "" } = {}) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const known = values.filter((v) => v !== null && v !== undefined);
  const max = Math.max(1e-9, ...known);
  const step = values.length > 1 ? width / (values.length - 1) : width;
  const points = [];
  values.forEach((v, i) => {
    if (v === null || v === undefined) return;
    const y = height - 2 - (v / max) * (height - 4);
    points.push(`${(i * step).toFixed(1)},${y.toFixed(1)}`);
  });
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", points.join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("class", "spark-line");
  svg.append(line);
  const title = document.createElementNS(SVG, "title");
  title.textContent = label;
  svg.append(title);
  return svg;
}

// A history of numbers for a sparkline: the newest `size` samples.
export class Series {
  constructor(size = 60) {
    this.size = size;
    this.values = [];
  }
  push(value) {
    this.values.push(value);
    if (this.values.length > this.size) this.values.shift();
  }
}

export function table(headers, rows, { empty = "Nothing here yet." } = {}) {
  // a column of numbers is right-aligned, its header too
  const numeric = (i) => rows.length > 0 && rows[0].children[i] && rows[0].children[i].classList.contains("num");
  const head = h("thead", {}, h("tr", {}, headers.map((name, i) => h("th", { scope: "col", class: numeric(i) ? "num" : null }, name))));
  const body = h("tbody", {}, rows);
  if (!rows.length) body.append(h("tr", {}, h("td", { colspan: headers.length, class: "muted" }, empty)));
  return h("div", { class: "table-wrap" }, h("table", {}, head, body));
}

export function card(title, ...children) {
  return h("section", { class: "card" }, title ? h("h2", {}, title) : null, ...children);
}

export function stat(label, value, { bad = false, id } = {}) {
  return h(
    "div",
    { class: ["stat", bad && "bad"], "data-stat": id },
    h("div", { class: "stat-value" }, value),
    h("div", { class: "stat-label" }, label),
  );
}

export function errorBox(error) {
  return h("p", { class: "error", role: "alert" }, error ? String(error.message || error) : "");
}

// Every write asks first: a modal with the action spelled out.
export function confirmAction(message) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = message;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

export function field(label, input) {
  return h("label", { class: "field" }, h("span", {}, label), input);
}
