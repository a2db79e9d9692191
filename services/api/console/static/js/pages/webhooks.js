// Webhooks: endpoints (create, rotate the secret, re-enable, delete) and
// each endpoint's delivery log.
import { api, query } from "../api.js";
import { h, fill, table, badge, fmtTime, act, toast, field, formValues, moreButton } from "../ui.js";

const eventTypes = ["enqueued", "started", "progress", "completed", "failed", "dlq", "cancelled"];

export async function render(main) {
  const list = h("div", { id: "webhooks-list" });
  const secret = h("div", { id: "webhook-secret" });
  const deliveries = h("div", { id: "webhook-deliveries" });
  fill(main, h("h1", {}, "Webhooks"), createForm(secret, () => load()), secret, list, deliveries);
  const load = async () => {
    const out = await api("GET", "/v1/webhooks");
    fill(list, table(["Endpoint", "Events", "Status", "Created", ""], out.webhooks, (w) => [
      h("span", { class: "mono" }, w.url), w.event_types.join(", "), badge(w.status), fmtTime(w.created_at), endpointActions(w, secret, deliveries, load),
    ], "No endpoints yet."));
  };
  await load();
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

function endpointActions(w, secret, deliveries, reload) {
  const log = h("button", { type: "button", class: "secondary" }, "Deliveries");
  log.addEventListener("click", () => act(log, () => showDeliveries(deliveries, w)));
  const rotate = h("button", { type: "button", class: "secondary" }, "Rotate secret");
  rotate.addEventListener("click", () => act(rotate, async () => showSecret(secret, await api("POST", `/v1/webhooks/${w.id}/rotate-secret`))));
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

async function showDeliveries(el, w) {
  const rows = [];
  const load = async (cursor) => {
    const out = await api("GET", `/v1/webhooks/${w.id}/deliveries` + query({ cursor }));
    rows.push(...out.deliveries);
    fill(el, h("h2", {}, "Deliveries to ", h("span", { class: "mono" }, w.url)),
      table(["Delivery", "Event", "Status", "Attempts#", "Response", "Latency", "Error", "Created"], rows, (d) => [
        h("span", { class: "mono" }, d.id), d.event_type, badge(d.status), String(d.attempts),
        d.last_status_code ? "HTTP " + d.last_status_code : "—", d.last_latency || "—", d.last_error || "", fmtTime(d.created_at),
      ], "No deliveries yet."), moreButton(out.next_cursor, load));
  };
  await load("");
  el.scrollIntoView();
}
