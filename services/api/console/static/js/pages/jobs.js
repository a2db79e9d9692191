// Jobs: filter by status, type, queue, tag and creation time (or jump to
// an id); newest first with cursor pagination; statuses update live from
// the tenant's event stream.
import { api, query, liveAvailable } from "../api.js";
import { h, fill, table, badge, fmtTime, formValues, select, field, moreButton, errorText, iso } from "../ui.js";

const statuses = ["", "queued", "scheduled", "running", "succeeded", "dead", "cancelled"];
const pageSize = 50;

/** statusAfter maps a lifecycle event to the status it leaves a job in. */
export const statusAfter = { enqueued: "queued", started: "running", progress: "running", completed: "succeeded", dlq: "dead", cancelled: "cancelled" };

export async function render(main, r) {
  const p = r.params;
  const form = h("form", { class: "filters", id: "jobs-filter" },
    field("Status", select("status", statuses, p.get("status") || "")),
    field("Type", h("input", { name: "type", value: p.get("type") || "", size: 12 })),
    field("Queue", h("input", { name: "queue", value: p.get("queue") || "", size: 12 })),
    field("Tag", h("input", { name: "tag", value: p.get("tag") || "", size: 10 })),
    field("Created from", h("input", { name: "from", type: "datetime-local", value: p.get("from") || "" })),
    field("Created before", h("input", { name: "to", type: "datetime-local", value: p.get("to") || "" })),
    h("button", { type: "submit" }, "Filter"),
    field("Job id", h("input", { name: "id", size: 18, placeholder: "job_…" })),
    h("button", { type: "button", class: "secondary", id: "jobs-open", onclick: () => openId(form) }, "Open"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = formValues(form);
    delete v.id;
    location.hash = "#/jobs" + query(v);
  });
  const list = h("div", { id: "jobs-list" });
  fill(main, h("h1", {}, "Jobs"), form, list);
  const filter = { status: p.get("status"), type: p.get("type"), queue: p.get("queue"), tag: p.get("tag") };
  const created = { created_from: iso(p.get("from")), created_to: iso(p.get("to")) };
  const rows = new Map();
  const load = async (cursor) => {
    const out = await api("GET", "/v1/jobs" + query({ ...filter, ...created, limit: pageSize, cursor }));
    for (const j of out.jobs) rows.set(j.id, j);
    fill(list, table(["Job", "Type", "Queue", "Status", "Attempt", "Created"], [...rows.values()], (j) => [
      h("a", { href: "#/jobs/" + encodeURIComponent(j.id), class: "mono" }, j.id), j.type, j.queue,
      h("span", { "data-job-status": j.id }, badge(j.status)), `${j.attempt}/${j.max_attempts}`, fmtTime(j.created_at),
    ], out.next_cursor ? "None among the jobs read so far; a status filter reads a bounded number per page: load more to read further back." : "No jobs match."), moreButton(out.next_cursor, load));
  };
  try { await load(""); } catch (e) { fill(list, h("p", { class: "error" }, errorText(e))); }
  return live(filter);
}

function openId(form) {
  const id = formValues(form).id;
  if (id) location.hash = "#/jobs/" + encodeURIComponent(id);
}

/** live updates the status badges of listed jobs from /v1/events. */
function live(filter) {
  if (!liveAvailable()) return null;
  const es = new EventSource("/v1/events" + query({ type: filter.type, queue: filter.queue, tag: filter.tag }));
  const onEvent = (ev) => {
    const d = JSON.parse(ev.data);
    const st = statusAfter[ev.type];
    const cell = st && document.querySelector(`[data-job-status="${CSS.escape(d.job_id)}"]`);
    if (cell) fill(cell, badge(st));
  };
  for (const t of Object.keys(statusAfter)) es.addEventListener(t, onEvent);
  return () => es.close();
}
