// The console's shell: sign-in, navigation and the page router. Pages are
// addressed by URL fragment (#/jobs, #/jobs/<id>?…) and each page module
// exports a render(main, ctx) that may return a cleanup function (to close
// its live streams and timers when the page is left).
import { api, setSession, currentSession, whenSignedOut, actingTenant, setActingTenant } from "./api.js";
import { h, fill, errorText } from "./ui.js";

const pages = {
  overview: () => import("./pages/overview.js"),
  jobs: () => import("./pages/jobs.js"),
  job: () => import("./pages/job.js"),
  dlq: () => import("./pages/dlq.js"),
  queues: () => import("./pages/queues.js"),
  schedules: () => import("./pages/schedules.js"),
  webhooks: () => import("./pages/webhooks.js"),
  audit: () => import("./pages/audit.js"),
  admin: () => import("./pages/admin.js"),
};

const main = document.getElementById("main");
let cleanup = null;
let generation = 0;

/** route parses the fragment: #/jobs/<id>?a=b → {page: "job", id, params}. */
function route() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, qs] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  let page = parts[0] || "overview";
  const id = parts[1] || "";
  if (page === "jobs" && id) page = "job";
  return { page, id, params: new URLSearchParams(qs || "") };
}

async function show() {
  if (cleanup) { try { cleanup(); } catch { /* page already gone */ } cleanup = null; }
  const gen = ++generation;
  const r = route();
  const s = currentSession();
  for (const a of document.querySelectorAll("#nav a")) {
    const target = a.getAttribute("href").slice(2);
    if (target === r.page || (target === "jobs" && r.page === "job")) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const load = pages[r.page];
  if (!load) { fill(main, h("h1", {}, "Not found"), h("p", {}, "No such page.")); return; }
  if (s.admin && !actingTenant() && r.page !== "admin") {
    fill(main, h("h1", {}, "Choose a tenant"),
      h("p", {}, "You are signed in with the admin key. Pick the tenant to look at in the header, or open ", h("a", { href: "#/admin" }, "Admin"), "."));
    return;
  }
  fill(main, h("p", { class: "muted" }, "Loading…"));
  try {
    const mod = await load();
    if (gen !== generation) return;
    const c = await mod.render(main, r);
    if (gen !== generation) { if (c) c(); return; }
    cleanup = c || null;
  } catch (e) {
    if (gen === generation) fill(main, h("h1", {}, "Something went wrong"), h("p", { class: "error" }, errorText(e)));
  }
}

function signInPage(message) {
  document.getElementById("top").hidden = true;
  const key = h("input", { type: "password", name: "key", id: "key", autocomplete: "current-password", required: true, placeholder: "fry_… or the admin key" });
  const err = h("p", { class: "error", id: "signin-error", role: "alert" }, message || "");
  const form = h("form", { id: "signin" },
    h("label", { for: "key" }, "API key or admin key", key),
    h("button", { type: "submit" }, "Sign in"), err,
    h("p", { class: "muted" }, "The key is exchanged for a session cookie and is not kept by the browser. `make dev` prints the dev tenant's key."));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const s = await api("POST", "/console/session", { key: key.value });
      key.value = "";
      start(s);
    } catch (e) {
      err.textContent = e.status === 401 ? "That key is not valid." : errorText(e);
    }
  });
  fill(main, h("section", { class: "card signin" }, h("h1", {}, "Sign in to Ferry"), form));
  key.focus();
}

function header(s) {
  document.getElementById("top").hidden = false;
  document.getElementById("nav-admin").hidden = !s.admin;
  const who = document.getElementById("who");
  if (!s.admin) { fill(who, "tenant ", h("strong", { id: "who-tenant" }, s.tenant_id)); return; }
  const input = h("input", { id: "acting-tenant", size: 12, value: actingTenant(), placeholder: "tenant id", "aria-label": "Tenant to act for" });
  input.addEventListener("change", () => { setActingTenant(input.value.trim()); show(); });
  fill(who, h("strong", {}, "admin"), " acting for ", input);
}

function start(s) {
  setSession(s);
  header(s);
  show();
}

document.getElementById("signout").addEventListener("click", async () => {
  try { await api("DELETE", "/console/session"); } catch { /* already gone */ }
  setSession(null);
  setActingTenant("");
  signInPage("Signed out.");
});

whenSignedOut(() => { setSession(null); signInPage("Your session ended; sign in again."); });

window.addEventListener("hashchange", () => { if (currentSession()) show(); });

api("GET", "/console/session").then(start, () => signInPage(""));
