// Job: the job's whole life as a timeline of its lifecycle events, live
// over SSE (GET /v1/jobs/{id}/events replays the history first), with its
// progress, payload, result, errors per attempt and trace id, and the
// webhook deliveries its events caused; cancel and re-run.
import { api, liveAvailable, ApiError, query } from "../api.js";
import { h, fill, badge, json, fmtTime, table, act, toast, errorText } from "../ui.js";
import { statusAfter } from "./jobs.js";
import { deliveryTable } from "./webhooks.js";

const terminal = new Set(["succeeded", "dead", "cancelled"]);
const pollMs = 2000;
const fallbackMs = 5000;

/** firstLoad reads the job, waiting a few seconds for one just submitted or re-driven (the status projection shows it moments after it is accepted). */
async function firstLoad(id) {
  for (let i = 0; ; i++) {
    try {
      return await api("GET", "/v1/jobs/" + encodeURIComponent(id));
    } catch (e) {
      if (!(e instanceof ApiError) || e.status !== 404 || i >= 10) throw e;
      await new Promise((ok) => setTimeout(ok, 500));
    }
  }
}

export async function render(main, r) {
  const id = r.id;
  let job = await firstLoad(id);
  const view = {
    status: h("span", { id: "job-status" }), progress: h("progress", { id: "job-progress", max: 100, value: 0 }),
    progressText: h("span", { id: "job-progress-text", class: "muted" }), facts: h("div"),
    timeline: h("ol", { class: "timeline", id: "job-timeline" }), attempts: h("div", { id: "job-attempts" }),
    outcome: h("div", { id: "job-outcome" }), actions: h("div", { class: "actions" }),
    webhooks: h("div", { id: "job-webhooks" }),
  };
  const failures = [];
  fill(main, h("h1", {}, "Job ", h("span", { class: "mono" }, id), " ", view.status),
    view.actions, h("section", { class: "card" }, view.progress, view.progressText), view.facts,
    h("div", { class: "grid" },
      h("section", { class: "card" }, h("h2", {}, "Timeline"), view.timeline),
      h("section", { class: "card" }, h("h2", {}, "Errors per attempt"), view.attempts)),
    view.outcome, h("section", { class: "card" }, h("h2", {}, "Webhook deliveries"), view.webhooks));
  const paint = () => paintJob(view, job, failures);
  paint();
  const webhooks = () => loadWebhooks(view.webhooks, id);
  webhooks();
  const refresh = async () => { job = await api("GET", "/v1/jobs/" + encodeURIComponent(id)); paint(); };
  // Re-read the job now and then as well: the only updates of an admin
  // session (EventSource cannot send Ferry-Tenant), and a safety net when a
  // proxy holds the stream back. Deliveries follow the job's events, so
  // they are re-read with it.
  const timer = setInterval(() => { if (!terminal.has(job.status)) refresh().catch(() => {}); webhooks(); }, liveAvailable() ? fallbackMs : pollMs);
  if (!liveAvailable()) return () => clearInterval(timer);
  const es = new EventSource("/v1/jobs/" + encodeURIComponent(id) + "/events");
  const onEvent = (ev) => {
    const e = JSON.parse(ev.data);
    view.timeline.append(timelineItem(ev.type, e));
    if (ev.type === "failed") failures.push({ attempt: e.attempt, ...e.data.error, at: e.time });
    if (ev.type === "progress") job.progress = { percent: e.data.percent, message: e.data.message };
    if (statusAfter[ev.type] && !terminal.has(job.status)) job.status = statusAfter[ev.type];
    if (["completed", "dlq", "cancelled"].includes(ev.type)) { es.close(); refresh().catch(() => {}); return; }
    paint();
  };
  for (const t of [...Object.keys(statusAfter), "failed"]) es.addEventListener(t, onEvent);
  es.addEventListener("reset", () => refresh().catch(() => {}));
  return () => { es.close(); clearInterval(timer); };
}

function paintJob(v, job, failures) {
  fill(v.status, badge(job.status));
  const pct = job.status === "succeeded" ? 100 : job.progress ? job.progress.percent : 0;
  v.progress.value = pct;
  v.progress.setAttribute("aria-label", `progress ${pct} %`);
  v.progressText.textContent = `${Math.round(pct)} %` + (job.progress && job.progress.message ? " — " + job.progress.message : "");
  fill(v.facts, h("section", { class: "card" }, h("dl", { class: "kv" },
    kv("Type", job.type), kv("Queue", job.queue), kv("Priority", job.priority), kv("Attempt", `${job.attempt} of ${job.max_attempts}`),
    kv("Tags", job.tags.join(", ") || "—"), kv("Created", fmtTime(job.created_at)), kv("Scheduled for", fmtTime(job.scheduled_for)),
    kv("Started", fmtTime(job.started_at)), kv("Finished", fmtTime(job.finished_at)),
    kv("Trace id", h("span", { class: "mono", id: "job-trace" }, job.trace_id || "—")),
    job.redriven_from ? kv("Re-driven from", h("a", { href: "#/jobs/" + encodeURIComponent(job.redriven_from) }, job.redriven_from)) : null)));
  const rows = failures.length ? failures : job.last_error ? [{ attempt: job.attempt, ...job.last_error }] : [];
  fill(v.attempts, table(["Attempt", "Class", "Error"], rows, (f) => [String(f.attempt), badge(f.class), f.message], "No failed attempts."));
  fill(v.outcome, h("div", { class: "grid" },
    h("section", { class: "card" }, h("h2", {}, "Payload"), json(job.payload)),
    h("section", { class: "card", id: "job-result" }, h("h2", {}, "Result"), json(job.result))));
  fill(v.actions, actions(job));
}

/** loadWebhooks shows the first page of the webhook deliveries the job's events caused. */
async function loadWebhooks(el, id) {
  try {
    const out = await api("GET", "/v1/webhooks/deliveries" + query({ job_id: id, limit: 20 }));
    fill(el, deliveryTable(out.deliveries, "No webhook deliveries."), out.next_cursor ? h("p", { class: "muted" }, "Showing the newest 20.") : null);
  } catch (e) {
    fill(el, h("p", { class: "muted" }, e.status === 404 ? "No webhooks service." : errorText(e)));
  }
}

function kv(k, v) { return [h("dt", {}, k), h("dd", {}, v === undefined || v === null ? "—" : v)]; }

function timelineItem(type, e) {
  let detail = "";
  if (type === "progress") detail = `${Math.round(e.data.percent)} %` + (e.data.message ? " — " + e.data.message : "");
  if (type === "failed" || type === "dlq") detail = `${e.data.error.class}: ${e.data.error.message}`;
  if (type === "started" && e.data.worker_id) detail = "on " + e.data.worker_id;
  return h("li", { class: type, "data-event": type }, h("strong", {}, type), ` attempt ${e.attempt} · `, h("time", { datetime: e.time }, fmtTime(e.time)), detail ? h("div", { class: "muted" }, detail) : null);
}

function actions(job) {
  const cancel = h("button", { type: "button", class: "danger", id: "job-cancel", disabled: terminal.has(job.status) }, "Cancel");
  cancel.addEventListener("click", () => act(cancel, async () => {
    if (!confirm("Cancel this job?")) return;
    await api("POST", `/v1/jobs/${encodeURIComponent(job.id)}/cancel`);
    toast("Cancel requested.");
  }));
  const rerun = h("button", { type: "button", class: "secondary", id: "job-rerun" }, "Re-run as a new job");
  rerun.addEventListener("click", () => act(rerun, async () => {
    const body = { type: job.type, payload: job.payload, queue: job.queue, priority: job.priority, tags: job.tags, max_attempts: job.max_attempts };
    const j = await api("POST", "/v1/jobs", body, { "Idempotency-Key": `console-rerun-${job.id}-${crypto.randomUUID()}` });
    location.hash = "#/jobs/" + encodeURIComponent(j.id);
  }));
  return [cancel, rerun, h("a", { href: "#/audit?job_id=" + encodeURIComponent(job.id) }, "Audit trail")];
}
