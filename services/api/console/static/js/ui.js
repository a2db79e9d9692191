// Small DOM helpers: elements are built with h(), never from HTML strings,
// so text from the API is always text.

/** h builds an element: h("a", {href, class, onclick}, "text", child, [children]). */
export function h(tag, attrs, ...children) {
  const svg = ["svg", "polyline", "line", "title"].includes(tag);
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else if (k === "value" && !svg) el.value = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** clear empties el and appends children. */
export function fill(el, ...children) { el.replaceChildren(); append(el, children); return el; }

/** fmtTime shows a timestamp in local time. */
export function fmtTime(s) {
  if (!s) return "—";
  const d = new Date(s);
  return isNaN(d) ? String(s) : d.toLocaleString();
}

/** badge is a coloured status label. */
export function badge(text) { return h("span", { class: "badge " + text, "data-status": text }, text); }

/** json pretty-prints a value. */
export function json(v) { return h("pre", {}, v === undefined || v === null ? "null" : JSON.stringify(v, null, 2)); }

/** table renders rows under headers; cells are from cellsOf(row). */
export function table(headers, rows, cellsOf, empty = "Nothing here.") {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h("div", { class: "scroll" }, h("table", {},
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col", class: x.endsWith("#") ? "num" : "" }, x.replace(/#$/, ""))))),
    h("tbody", {}, rows.map((r) => rowOf(cellsOf(r))))));
}

function rowOf(cells) {
  const tr = h("tr");
  for (const c of cells) tr.append(c instanceof HTMLTableCellElement ? c : h("td", {}, c));
  return tr;
}

/** num is a right-aligned numeric cell. */
export function num(n) { return h("td", { class: "num" }, n === undefined || n === null ? "—" : String(n)); }

/** sparkline draws values (oldest first) as an SVG line. */
export function sparkline(values, label, bad = false) {
  const w = 120, ht = 30, max = Math.max(1, ...values);
  const step = values.length > 1 ? w / (values.length - 1) : w;
  const pts = values.map((v, i) => `${(i * step).toFixed(1)},${(ht - (v / max) * (ht - 2) - 1).toFixed(1)}`).join(" ");
  return h("svg", { class: "spark" + (bad ? " bad" : ""), viewBox: `0 0 ${w} ${ht}`, preserveAspectRatio: "none", role: "img", "aria-label": label },
    h("title", {}, label), h("polyline", { points: pts || "0,29 120,29" }));
}

/** toast shows a short message. */
export function toast(msg, bad = false) {
  const t = h("div", { class: "toast" + (bad ? " bad" : "") }, msg);
  document.getElementById("toasts").append(t);
  setTimeout(() => t.remove(), 5000);
}

/** errorText is a readable message of an API error. */
export function errorText(e) {
  const fields = e && e.fields ? Object.entries(e.fields).map(([k, v]) => `${k}: ${v}`).join("; ") : "";
  return (e && e.message ? e.message : String(e)) + (fields ? ` (${fields})` : "");
}

/** act runs an action from a button, disabling it meanwhile and reporting errors. */
export async function act(button, fn) {
  button.disabled = true;
  try { return await fn(); } catch (e) { toast(errorText(e), true); return undefined; } finally { button.disabled = false; }
}

/** input is a labelled form field. */
export function field(label, control) { return h("label", {}, label, control); }

/** formValues reads the named fields of a form. */
export function formValues(form) {
  const out = {};
  for (const [k, v] of new FormData(form).entries()) out[k] = typeof v === "string" ? v.trim() : v;
  return out;
}

/** select builds a <select> of options ([value, label] or value). */
export function select(name, options, value) {
  return h("select", { name }, options.map((o) => {
    const [v, l] = Array.isArray(o) ? o : [o, o || "any"];
    return h("option", { value: v, selected: v === value }, l);
  }));
}

/** moreButton loads the next page of a cursor-paginated list. */
export function moreButton(next, load) {
  if (!next) return null;
  const b = h("button", { type: "button", class: "secondary", "data-more": "" }, "Load more");
  b.addEventListener("click", () => act(b, () => load(next)));
  return b;
}

/** iso turns a datetime-local field's value into an RFC 3339 time (undefined when empty). */
export function iso(local) { return local ? new Date(local).toISOString() : undefined; }
