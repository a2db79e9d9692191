// Schedules: recurring jobs, where the deployment has them (GET
// /v1/schedules). The page shows every field the API returns, so it does
// not need to change when schedules gain fields.
import { api, ApiError, query } from "../api.js";
import { h, fill, table, moreButton, json } from "../ui.js";

export async function render(main) {
  const list = h("div", { id: "schedules-list" });
  fill(main, h("h1", {}, "Schedules"), list);
  const rows = [];
  const load = async (cursor) => {
    const out = await api("GET", "/v1/schedules" + query({ cursor }));
    rows.push(...(out.schedules || []));
    const cols = rows.length ? Object.keys(rows[0]).filter((k) => typeof rows[0][k] !== "object" || rows[0][k] === null) : [];
    fill(list, table(cols, rows, (s) => cols.map((c) => (s[c] === null || s[c] === undefined ? "—" : String(s[c]))), "No schedules yet."),
      rows.length ? h("details", {}, h("summary", {}, "As JSON"), json(rows)) : null, moreButton(out.next_cursor, load));
  };
  try {
    await load("");
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 404) throw e;
    fill(list, h("p", { class: "muted", id: "schedules-unavailable" }, "This deployment has no schedules API."));
  }
}
