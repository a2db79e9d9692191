// Admin (admin key only): tenants with their weight and limits, their API
// keys (create, revoke), and which tenant the console acts for.
import { api, query, setActingTenant } from "../api.js";
import { h, fill, table, badge, fmtTime, act, toast, field, formValues, moreButton } from "../ui.js";

const limits = ["weight", "max_queued", "max_running", "max_queues", "max_payload_bytes", "max_webhook_endpoints"];

export async function render(main) {
  const list = h("div", { id: "tenants-list" });
  const detail = h("div", { id: "tenant-detail" });
  const created = h("div", { id: "tenant-created" });
  fill(main, h("h1", {}, "Admin"), createForm(created, () => load("")), created, list, detail);
  const rows = [];
  const load = async (cursor) => {
    if (!cursor) rows.length = 0;
    const out = await api("GET", "/v1/admin/tenants" + query({ cursor }));
    rows.push(...out.tenants);
    fill(list, table(["Tenant", "Name", "Weight#", "Max queued#", "Max running#", "Rate limit", "State", ""], rows, (t) => [
      h("span", { class: "mono" }, t.id), t.name, String(t.weight), String(t.max_queued || "default"), String(t.max_running || "—"),
      t.rate_limit ? `${t.rate_limit.per_second}/s (burst ${t.rate_limit.burst})` : "—", badge(t.disabled ? "disabled" : "active"),
      h("div", { class: "actions" },
        h("button", { type: "button", class: "secondary", onclick: () => showTenant(detail, t.id, () => load("")) }, "Edit"),
        h("button", { type: "button", class: "secondary", onclick: () => { setActingTenant(t.id); location.hash = "#/overview"; location.reload(); } }, "Act as")),
    ], "No tenants."), moreButton(out.next_cursor, load));
  };
  await load("");
}

function createForm(out, reload) {
  const form = h("form", { class: "filters", id: "tenant-create" },
    field("Id", h("input", { name: "id", size: 12, placeholder: "optional" })),
    field("Name", h("input", { name: "name", required: true, size: 16 })),
    h("button", { type: "submit" }, "Create tenant"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = formValues(form);
    act(form.querySelector("button"), async () => {
      const t = await api("POST", "/v1/admin/tenants", v.id ? v : { name: v.name });
      fill(out, h("p", { class: "secret" }, `Tenant ${t.id} created. Its API key (shown once): `, h("code", {}, t.api_key)));
      form.reset();
      await reload();
    });
  });
  return h("section", { class: "card" }, h("h2", {}, "New tenant"), form);
}

async function showTenant(el, id, reload) {
  const t = await api("GET", "/v1/admin/tenants/" + encodeURIComponent(id));
  const keys = await api("GET", `/v1/admin/tenants/${encodeURIComponent(id)}/keys`);
  const form = h("form", { class: "filters", id: "tenant-limits" },
    field("Name", h("input", { name: "name", value: t.name })),
    limits.map((k) => field(k.replace(/_/g, " "), h("input", { name: k, type: "number", min: 0, value: t[k] || "", size: 8 }))),
    field("rate /s", h("input", { name: "per_second", type: "number", min: 0, step: "any", value: t.rate_limit ? t.rate_limit.per_second : "" })),
    field("burst", h("input", { name: "burst", type: "number", min: 0, value: t.rate_limit ? t.rate_limit.burst : "" })),
    field("disabled", h("input", { name: "disabled", type: "checkbox", checked: t.disabled })),
    h("button", { type: "submit" }, "Save"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    act(form.querySelector("button[type=submit]"), async () => {
      await api("PATCH", "/v1/admin/tenants/" + encodeURIComponent(id), patchOf(form));
      toast("Saved.");
      await reload();
    });
  });
  const newKey = h("button", { type: "button" }, "New API key");
  const keyOut = h("div");
  newKey.addEventListener("click", () => act(newKey, async () => {
    const k = await api("POST", `/v1/admin/tenants/${encodeURIComponent(id)}/keys`);
    fill(keyOut, h("p", { class: "secret" }, "New key (shown once): ", h("code", {}, k.api_key)));
  }));
  fill(el, h("section", { class: "card" }, h("h2", {}, "Tenant ", h("span", { class: "mono" }, id)), form,
    h("h2", {}, "API keys"), newKey, keyOut,
    table(["Key", "Prefix", "Created", "Revoked", ""], keys.keys, (k) => [
      h("span", { class: "mono" }, k.id), h("span", { class: "mono" }, k.prefix + "…"), fmtTime(k.created_at), k.revoked_at ? fmtTime(k.revoked_at) : "—",
      k.revoked_at ? "" : revokeButton(k, () => showTenant(el, id, reload)),
    ])));
}

function patchOf(form) {
  const v = formValues(form);
  const body = { name: v.name, disabled: form.elements.disabled.checked };
  for (const k of limits) if (v[k] !== "") body[k] = Number(v[k]);
  body.rate_limit = v.per_second ? { per_second: Number(v.per_second), burst: Number(v.burst || 1) } : null;
  return body;
}

function revokeButton(k, reload) {
  const b = h("button", { type: "button", class: "danger" }, "Revoke");
  b.addEventListener("click", () => act(b, async () => {
    if (!confirm("Revoke this key? Its sessions end too.")) return;
    await api("DELETE", "/v1/admin/keys/" + encodeURIComponent(k.id));
    await reload();
  }));
  return b;
}
