// Calls to Ferry's /v1 APIs with the session cookie. The browser attaches
// the HttpOnly cookie itself; changes carry the session's CSRF token. No
// key is ever held here.

let session = null;

/** setSession remembers who is signed in (from /console/session). */
export function setSession(s) { session = s; }

/** currentSession is the signed-in session, or null. */
export function currentSession() { return session; }

const tenantSlot = "ferry.console.tenant";

/** actingTenant is the tenant an admin session acts for ("" for none). */
export function actingTenant() {
  if (!session) return "";
  return session.admin ? (sessionStorage.getItem(tenantSlot) || "") : session.tenant_id;
}

/** setActingTenant picks the tenant an admin session acts for. */
export function setActingTenant(id) {
  if (id) sessionStorage.setItem(tenantSlot, id); else sessionStorage.removeItem(tenantSlot);
}

/** ApiError is an error answer of the API, with its stable code. */
export class ApiError extends Error {
  constructor(status, code, message, fields) {
    super(message || code);
    this.status = status; this.code = code; this.fields = fields || {};
  }
}

let onUnauthorized = () => {};
/** whenSignedOut sets what happens when the session is gone (401). */
export function whenSignedOut(fn) { onUnauthorized = fn; }

/** request sends a request and returns the fetch Response (for exports and pings). */
export async function request(method, path, body, headers = {}) {
  const h = { Accept: "application/json", ...headers };
  if (method !== "GET" && method !== "HEAD" && session) h["X-Ferry-CSRF"] = session.csrf_token;
  if (session && session.admin && actingTenant() && !path.startsWith("/v1/admin/")) h["Ferry-Tenant"] = actingTenant();
  let payload;
  if (body !== undefined) { h["Content-Type"] = "application/json"; payload = JSON.stringify(body); }
  return fetch(path, { method, headers: h, body: payload, credentials: "same-origin", cache: "no-store" });
}

/** api sends a JSON request and returns the decoded answer, throwing ApiError. */
export async function api(method, path, body, headers) {
  const res = await request(method, path, body, headers);
  if (res.status === 204) return null;
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const e = (data && data.error) || {};
    const err = new ApiError(res.status, e.code || "http_" + res.status, e.message || res.statusText, e.fields);
    if (res.status === 401 && !path.startsWith("/console/session")) onUnauthorized();
    throw err;
  }
  return data;
}

/** liveAvailable says whether SSE streams work for this session (EventSource cannot send Ferry-Tenant). */
export function liveAvailable() { return !!session && !session.admin; }

/** query builds a query string from an object, skipping empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) v.filter(Boolean).forEach((x) => q.append(k, x));
    else if (v !== undefined && v !== null && v !== "") q.set(k, v);
  }
  const s = q.toString();
  return s ? "?" + s : "";
}
