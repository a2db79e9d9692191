// Webhooks: endpoints (create, rotate the secret, re-enable, delete), each
// endpoint's delivery log, and one delivery's request and responses per
// attempt, with replay. #/webhooks?endpoint=<id>&delivery=<id> opens a
// delivery directly (the Job page links there).
import { api, query } from "../api.js";
import { h, fill, table, badge, fmtTime, act, toast, field, formValues, moreButton, errorText } from "../ui.js";

const eventTypes = ["enqueued", "started", "progress", "completed", "failed", "dlq", "cancelled"];
const replayPollMs = 1000;

export async function render(main, r) {
  const list = h("div", { id: "webhooks-list" });
  const secret = h("div", { id: "webhook-secret" });
  const deliveries = h("div", { id: "webhook-deliveries" });
  const detail = h("div", { id: "webhook-delivery" });
  fill(main, h("h1", {}, "Webhooks"), createForm(secret, () => load()), secret, list, deliveries, detail);
  const timers = new Set();
  const load = async () => {
    const out = await api("GET", "/v1/webhooks");
    fill(list, table(["Endpoint", "Events", "Status", "Created", ""], out.webhooks, (w) => [
      h("span", { class: "mono" }, w.url), w.event_types.join(", "), badge(w.status), fmtTime(w.created_at),
      endpointActions(w, { secret, deliveries, detail, timers }, load),
    ], "No endpoints yet."));
  };
  await load();
  const endpoint = r.params.get("endpoint");
  if (endpoint) {
    try {
      const w = await api("GET", "/v1/webhooks/" + encodeURIComponent(endpoint));
      const reloadList = await showDeliveries(deliveries, w, detail, timers);
      if (r.params.get("delivery")) await showDelivery(detail, w, r.params.get("delivery"), timers, reloadList);
    } catch (e) {
      fill(detail, h("p", { class: "error" }, errorText(e)));
    }
  }
  return () => timers.forEach((t) => clearTimeout(t));
}

function createForm(secret, reload) {
  const form = h("form", { class: "filters", id: "webhook-create" },
    field("URL", h("input", { name: "url", type: "url", required: true, size: 36, placeholder: "https://example.com/hooks/ferry" })),
    h("fieldset", { class: "filters" }, h("legend", {}, "Events"), eventTypes.map((t) =>
      h("label", { class: "check" }, h("input", { type: "checkbox", name: "event_types", value: t, checked: ["completed", "dlq"].includes(t) }), t))),
    h("button", { type: "submit" }, "Add endpoint"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const types = [...form.querySelectorAll("input[name=event_types]:checked")].map((i) => i.value);
    act(form.querySelector("button"), async () => {
      const w = await api("POST", "/v1/webhooks", { url: formValues(form).url, event_types: types });
      showSecret(secret, w);
      form.reset();
      await reload();
    });
  });
  return h("section", { class: "card" }, h("h2", {}, "New endpoint"), form);
}

function showSecret(el, w) {
  fill(el, h("p", { class: "secret" }, "Signing secret of ", w.url, " (shown once): ", h("code", {}, w.secret)));
}

function endpointActions(w, view, reload) {
  const log = h("button", { type: "button", class: "secondary", "data-deliveries": w.id }, "Deliveries");
  log.addEventListener("click", () => act(log, () => showDeliveries(view.deliveries, w, view.detail, view.timers)));
  const rotate = h("button", { type: "button", class: "secondary" }, "Rotate secret");
  rotate.addEventListener("click", () => act(rotate, async () => showSecret(view.secret, await api("POST", `/v1/webhooks/${w.id}/rotate-secret`))));
  const enable = w.status === "disabled" ? h("button", { type: "button" }, "Enable") : null;
  if (enable) enable.addEventListener("click", () => act(enable, async () => { await api("POST", `/v1/webhooks/${w.id}/enable`); await reload(); }));
  const del = h("button", { type: "button", class: "danger" }, "Delete");
  del.addEventListener("click", () => act(del, async () => {
    if (!confirm("Delete this endpoint?")) return;
    await api("DELETE", `/v1/webhooks/${w.id}`);
    toast("Endpoint deleted.");
    await reload();
  }));
  return h("div", { class: "actions" }, log, rotate, enable, del);
}

/** deliveryLink is a link to one delivery's log. */
export function deliveryLink(d) {
  return h("a", { href: `#/webhooks${query({ endpoint: d.endpoint_id, delivery: d.id })}`, class: "mono", "data-delivery": d.id }, d.id);
}

/** deliveryTable renders deliveries (of an endpoint or of a job). */
export function deliveryTable(rows, empty) {
  return table(["Delivery", "Event", "Status", "Attempts#", "Response", "Latency", "Error", "Created"], rows, (d) => [
    deliveryLink(d), d.event_type, badge(d.status), String(d.attempts),
    d.last_status_code ? "HTTP " + d.last_status_code : "—", d.last_latency || "—", h("span", { class: "hide-narrow" }, d.last_error || ""), fmtTime(d.created_at),
  ], empty);
}

async function showDeliveries(el, w, detail, timers) {
  let rows = [];
  const load = async (cursor) => {
    const out = await api("GET", `/v1/webhooks/${w.id}/deliveries` + query({ cursor }));
    if (!cursor) rows = [];
    rows.push(...out.deliveries);
    fill(el, h("h2", {}, "Deliveries to ", h("span", { class: "mono" }, w.url)),
      deliveryTable(rows, "No deliveries yet."), moreButton(out.next_cursor, load));
    // The links change the fragment; on this page, open the delivery in place.
    for (const a of el.querySelectorAll("a[data-delivery]")) {
      a.addEventListener("click", (ev) => { ev.preventDefault(); act(a, () => showDelivery(detail, w, a.dataset.delivery, timers, () => load(""))); });
    }
  };
  await load("");
  el.scrollIntoView();
  return () => load("");
}

/** showDelivery shows one delivery: the request it sends, each attempt's response, and a replay button; reloadList refreshes the list it is in once a replay is sent. */
async function showDelivery(el, w, id, timers, reloadList) {
  let d;
  try { d = await api("GET", `/v1/webhooks/${w.id}/deliveries/${encodeURIComponent(id)}`); } catch (e) { fill(el, h("p", { class: "error" }, errorText(e))); return; }
  const replay = h("button", { type: "button", id: "webhook-replay", disabled: d.status === "pending" }, "Replay");
  replay.addEventListener("click", () => act(replay, async () => {
    await api("POST", `/v1/webhooks/${w.id}/deliveries/${encodeURIComponent(id)}/replay`);
    toast("Replay queued: the delivery is sent again, signed afresh.");
    await showDelivery(el, w, id, timers, reloadList);
  }));
  fill(el, h("section", { class: "card", id: "webhook-delivery-log" },
    h("h2", {}, "Delivery ", h("span", { class: "mono" }, d.id), " ", h("span", { id: "webhook-delivery-status" }, badge(d.status))),
    h("dl", { class: "kv" }, kv("Endpoint", w.url), kv("Event", `${d.event_type} (${d.event_id})`),
      kv("Job", h("a", { href: "#/jobs/" + encodeURIComponent(d.job_id), class: "mono" }, d.job_id)),
      kv("Attempts", String(d.attempts)), kv("Next retry", fmtTime(d.next_retry_at))),
    h("div", { class: "actions" }, replay, d.replay_requested_by ? h("span", { class: "muted" }, "replay requested by " + d.replay_requested_by) : null),
    h("h3", {}, "Request"), h("p", { class: "mono" }, `${d.request.method} ${d.request.url}`),
    h("pre", { id: "webhook-request-body" }, d.request.body + (d.request.body_truncated ? "\n…" : "")),
    h("h3", {}, "Attempts"), h("ol", { class: "attempts", id: "webhook-attempts" }, d.history.map(attemptItem))));
  el.scrollIntoView();
  if (d.status === "pending") {
    const t = setTimeout(async () => {
      timers.delete(t);
      await showDelivery(el, w, id, timers, reloadList);
      if (reloadList) reloadList().catch(() => {});
    }, replayPollMs);
    timers.add(t);
  }
}

function kv(k, v) { return [h("dt", {}, k), h("dd", {}, v === undefined || v === null ? "—" : v)]; }

function attemptItem(a) {
  const res = a.response;
  return h("li", { "data-attempt": a.attempt, "data-replay": a.replay ? "true" : "false" },
    h("strong", {}, `Attempt ${a.attempt}`), " · ", h("time", { datetime: a.at }, fmtTime(a.at)), " · ",
    res ? `HTTP ${a.status_code}` : "no response", ` · ${a.latency}`,
    a.replay ? [" · ", badge("replay"), ` by ${a.replayed_by}`] : null,
    a.error ? h("div", { class: "error" }, a.error) : null,
    h("details", {}, h("summary", {}, "Request headers"), headerTable(a.request_headers)),
    res ? h("details", { open: true }, h("summary", {}, "Response"), headerTable(res.headers),
      h("pre", { class: "response-body" }, res.body + (res.body_truncated ? "\n… (first 4 KiB)" : ""))) : null);
}

function headerTable(hs) {
  return table(["Header", "Value"], Object.entries(hs || {}), ([k, v]) => [h("span", { class: "mono" }, k), h("span", { class: "mono" }, v)], "No headers.");
}
