// Dead letters: filter (type, queue, class, tag, text, time), inspect (history with error classes), edit the
// payload and re-drive one entry, suppress, purge; bulk re-drive of a
// filter after a dry-run preview of what it would re-drive.
import { api, query } from "../api.js";
import { h, fill, table, badge, fmtTime, json, act, toast, field, select, formValues, moreButton, errorText, iso } from "../ui.js";

const classes = ["", "app_error", "retryable", "permanent", "timeout", "worker_lost", "expired", "cancelled"];

export async function render(main, r) {
  const p = r.params;
  const filter = { type: p.get("type"), queue: p.get("queue"), class: p.get("class"), tag: p.get("tag"), q: p.get("q"), from: iso(p.get("from")), to: iso(p.get("to")) };
  const form = h("form", { class: "filters", id: "dlq-filter" },
    field("Type", h("input", { name: "type", value: p.get("type") || "", size: 12 })),
    field("Queue", h("input", { name: "queue", value: p.get("queue") || "", size: 12 })),
    field("Class", select("class", classes, p.get("class") || "")),
    field("Tag", h("input", { name: "tag", value: p.get("tag") || "", size: 10 })),
    field("Text", h("input", { name: "q", value: p.get("q") || "", size: 14 })),
    field("From", h("input", { name: "from", type: "datetime-local", value: p.get("from") || "" })),
    field("To", h("input", { name: "to", type: "datetime-local", value: p.get("to") || "" })),
    h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); location.hash = "#/dlq" + query(formValues(form)); });
  const bulk = h("section", { class: "card", id: "dlq-bulk" });
  const list = h("div", { id: "dlq-list" });
  const detail = h("div", { id: "dlq-detail" });
  fill(main, h("h1", {}, "Dead letters"), form, bulk, list, detail);
  bulkPanel(bulk, filter);
  const rows = [];
  const load = async (cursor) => {
    const out = await api("GET", "/v1/dlq" + query({ ...filter, limit: 50, cursor }));
    rows.push(...out.entries);
    fill(list, table(["Job", "Type", "Queue", "Class", "Error", "Dead at", "State"], rows, (e) => [
      h("button", { type: "button", class: "link mono", "data-entry": e.id, onclick: () => showEntry(detail, e.id) }, e.id),
      e.type, e.queue, badge(e.error.class), h("span", { class: "hide-narrow" }, e.error.message), fmtTime(e.dead_at), entryState(e),
    ], "The dead-letter queue is empty."), moreButton(out.next_cursor, load));
  };
  try { await load(""); } catch (e) { fill(list, h("p", { class: "error" }, errorText(e))); }
  if (r.id) showEntry(detail, r.id);
}

function entryState(e) {
  if (e.redrive) return h("a", { href: "#/jobs/" + encodeURIComponent(e.redrive.job_id) }, badge("redriven"));
  return e.suppressed ? badge("suppressed") : badge("dead");
}

/** bulkPanel offers the bulk re-drive of the current filter: a dry run first, then the real one. */
function bulkPanel(el, filter) {
  const { tag, ...rest } = filter;
  const body = { filter: Object.fromEntries(Object.entries({ ...rest, tags: tag ? [tag] : undefined }).filter(([, v]) => v)) };
  const out = h("div", { id: "dlq-preview" });
  const go = h("button", { type: "button", id: "dlq-redrive-all", disabled: true }, "Re-drive them");
  const dry = h("button", { type: "button", class: "secondary", id: "dlq-dry-run" }, "Preview bulk re-drive (dry run)");
  dry.addEventListener("click", () => act(dry, async () => {
    const res = await api("POST", "/v1/dlq/redrive", { ...body, dry_run: true });
    fill(out, h("p", { id: "dlq-preview-count" }, `${res.count} ${res.count === 1 ? "entry" : "entries"} would be re-driven`, res.count > res.sample.length ? `; the first ${res.sample.length}:` : ":"),
      table(["Job", "Type", "Class"], res.sample, (e) => [h("span", { class: "mono" }, e.id), e.type, badge(e.error.class)], "Nothing to re-drive."));
    go.disabled = res.count === 0;
    go.textContent = `Re-drive ${res.count}`;
  }));
  go.addEventListener("click", () => act(go, async () => {
    const res = await api("POST", "/v1/dlq/redrive", body);
    go.disabled = true;
    fill(out, h("p", { id: "dlq-bulk-result" }, `Re-driven: ${res.redriven}` + (res.failed ? `, failed: ${res.failed}` : "") + (res.remaining ? `, remaining: ${res.remaining}` : "")));
    toast(`Re-drove ${res.redriven} jobs.`);
  }));
  fill(el, h("h2", {}, "Bulk re-drive of this filter"), h("div", { class: "actions" }, dry, go), out);
}

/** showEntry shows one entry: history, editable payload, actions. */
async function showEntry(el, id) {
  let e;
  try { e = await api("GET", "/v1/dlq/" + encodeURIComponent(id)); } catch (err) { fill(el, h("p", { class: "error" }, errorText(err))); return; }
  const payload = h("textarea", { id: "dlq-payload", "aria-label": "Payload to re-drive with" });
  payload.value = JSON.stringify(e.job.payload, null, 2);
  const redrive = h("button", { type: "button", id: "dlq-redrive-one" }, "Re-drive");
  redrive.addEventListener("click", () => act(redrive, async () => {
    let edited;
    try { edited = JSON.parse(payload.value); } catch { throw new Error("the payload is not valid JSON"); }
    const changed = JSON.stringify(edited) !== JSON.stringify(e.job.payload);
    const res = await api("POST", `/v1/dlq/${encodeURIComponent(id)}/redrive`, changed ? { payload: edited } : {});
    toast("Re-driven as " + res.job.id);
    location.hash = "#/jobs/" + encodeURIComponent(res.job.id);
  }));
  const suppress = h("button", { type: "button", class: "secondary", id: "dlq-suppress" }, e.suppressed ? "Unsuppress" : "Suppress");
  suppress.addEventListener("click", () => act(suppress, async () => {
    await api(e.suppressed ? "DELETE" : "POST", `/v1/dlq/${encodeURIComponent(id)}/suppress`);
    showEntry(el, id);
  }));
  const purge = h("button", { type: "button", class: "danger", id: "dlq-purge" }, "Purge");
  purge.addEventListener("click", () => act(purge, async () => {
    if (!confirm("Delete this entry for good?")) return;
    await api("DELETE", "/v1/dlq/" + encodeURIComponent(id));
    fill(el, h("p", {}, "Purged."));
  }));
  fill(el, h("section", { class: "card", id: "dlq-entry" }, h("h2", {}, "Entry ", h("span", { class: "mono" }, id), " ", entryState(e)),
    h("p", {}, badge(e.error.class), " ", e.error.message),
    h("h2", {}, "Attempts"),
    table(["Attempt", "Class", "Error", "Worker", "Finished"], e.history, (a) => [String(a.attempt), badge(a.class || "—"), a.error || "", a.worker_id || "", fmtTime(a.finished_at)]),
    h("h2", {}, "Payload (edit before re-driving)"), payload,
    h("div", { class: "actions" }, redrive, suppress, purge),
    h("details", {}, h("summary", {}, "Original submission"), json(e.job))));
  el.scrollIntoView();
}
