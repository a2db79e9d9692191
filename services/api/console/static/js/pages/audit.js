// Audit: query the hash-chained audit log, export it (NDJSON or CSV) and
// verify the chain, showing the first broken row of each broken chain.
import { api, request, query } from "../api.js";
import { h, fill, table, fmtTime, badge, act, field, select, formValues, moreButton, errorText, iso } from "../ui.js";

const types = ["", "enqueued", "started", "progress", "completed", "failed", "dlq", "cancelled"];

export async function render(main, r) {
  const p = r.params;
  const filter = { job_id: p.get("job_id"), actor: p.get("actor"), type: p.get("type"), from: iso(p.get("from")), to: iso(p.get("to")) };
  const form = h("form", { class: "filters", id: "audit-filter" },
    field("Job id", h("input", { name: "job_id", value: p.get("job_id") || "", size: 18 })),
    field("Actor", h("input", { name: "actor", value: p.get("actor") || "", size: 12 })),
    field("Event", select("type", types, p.get("type") || "")),
    field("From", h("input", { name: "from", type: "datetime-local", value: p.get("from") || "" })),
    field("To", h("input", { name: "to", type: "datetime-local", value: p.get("to") || "" })),
    h("button", { type: "submit" }, "Query"));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); location.hash = "#/audit" + query(formValues(form)); });
  const verify = h("section", { class: "card", id: "audit-verify" });
  const list = h("div", { id: "audit-list" });
  fill(main, h("h1", {}, "Audit log"), form, h("div", { class: "actions" }, exportButton(filter, "ndjson"), exportButton(filter, "csv")), verify, list);
  verifyPanel(verify);
  const rows = [];
  const load = async (cursor) => {
    const out = await api("GET", "/v1/audit/events" + query({ ...filter, limit: 100, cursor }));
    rows.push(...out.events);
    fill(list, table(["Seq#", "Time", "Event", "Job", "Attempt#", "Actor", "Hash"], rows, (e) => [
      String(e.seq), fmtTime(e.occurred_at), badge(e.type), h("a", { href: "#/jobs/" + encodeURIComponent(e.job_id), class: "mono" }, e.job_id),
      String(e.attempt), e.actor, h("span", { class: "mono hide-narrow" }, (e.hash || "").slice(0, 12)),
    ], "No audit events match."), moreButton(out.next_cursor, load));
  };
  try { await load(""); } catch (e) { fill(list, h("p", { class: "error" }, errorText(e))); }
}

function exportButton(filter, format) {
  const b = h("button", { type: "button", class: "secondary", id: "audit-export-" + format }, "Export " + format.toUpperCase());
  b.addEventListener("click", () => act(b, async () => {
    const res = await request("GET", "/v1/audit/export" + query({ ...filter, format }));
    if (!res.ok) throw new Error(`export failed: HTTP ${res.status}`);
    const url = URL.createObjectURL(await res.blob());
    const a = h("a", { href: url, download: `audit.${format}` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }));
  return b;
}

function verifyPanel(el) {
  const out = h("div", { id: "audit-verify-result" });
  const b = h("button", { type: "button", id: "audit-verify-run" }, "Verify the chain");
  b.addEventListener("click", () => act(b, async () => {
    const rep = await api("GET", "/v1/audit/verify");
    fill(out, h("p", {}, rep.ok ? badge("ok") : badge("broken"),
      ` ${rep.rows_checked} rows in ${rep.chains_checked} chains checked at ${fmtTime(rep.verified_at)}` + (rep.cuts ? `; ${rep.cuts} chains begin after retention` : "")),
    rep.broken.length ? table(["Chain", "First broken row (seq)#", "Event", "Reason", "Detail"], rep.broken, (x) => [
      h("span", { class: "mono" }, x.chain_id), String(x.seq), h("span", { class: "mono" }, x.event_id || "—"), x.reason, x.detail,
    ]) : null);
  }));
  fill(el, h("h2", {}, "Integrity"), b, out);
}
