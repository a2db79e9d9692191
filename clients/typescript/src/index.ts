// Ferry's TypeScript client: the request and response types are generated
// from Ferry's OpenAPI document (src/schema.d.ts, by openapi-typescript; run
// `npm run generate` after the API changes), requests go through
// openapi-fetch, and jobEvents follows a job over Server-Sent Events.
import createClient from "openapi-fetch";
import type { components, paths } from "./schema.js";

export type { components, paths };
export type Job = components["schemas"]["Job"];
export type JobRequest = components["schemas"]["JobRequest"];
export type StreamEvent = components["schemas"]["StreamEvent"];
export type Status = components["schemas"]["Status"];

export interface FerryOptions {
  /** Base URL of the API, e.g. http://127.0.0.1:8080 */
  baseUrl: string;
  /** API key of a tenant (or the admin key). */
  apiKey: string;
  /** fetch implementation; defaults to the global fetch. */
  fetch?: typeof fetch;
}

/** createFerryClient returns a typed openapi-fetch client of the API. */
export function createFerryClient(opts: FerryOptions) {
  return createClient<paths>({
    baseUrl: opts.baseUrl.replace(/\/+$/, ""),
    headers: { Authorization: `Bearer ${opts.apiKey}` },
    fetch: opts.fetch,
  });
}

/**
 * newIdempotencyKey returns a random Idempotency-Key. Send the same key when
 * you retry a submission: Ferry answers the job of the first request
 * instead of creating a second one.
 */
export function newIdempotencyKey(): string {
  return "ferry-ts-" + crypto.randomUUID();
}

/** The events after which a job's stream ends. */
const finalEvents = new Set(["completed", "dlq", "cancelled"]);

export interface JobEvent {
  /** Position in Ferry's log (the SSE id); resume after it. */
  seq: number;
  event: StreamEvent;
}

/**
 * jobEvents yields the events of one job, from its first (or after
 * lastEventId) until its final event (completed, dlq or cancelled). A
 * dropped connection is resumed with Last-Event-ID, up to maxReconnects
 * times in a row.
 */
export async function* jobEvents(
  opts: FerryOptions,
  jobId: string,
  { lastEventId, maxReconnects = 5, signal }: { lastEventId?: number; maxReconnects?: number; signal?: AbortSignal } = {},
): AsyncGenerator<JobEvent> {
  const doFetch = opts.fetch ?? fetch;
  const url = `${opts.baseUrl.replace(/\/+$/, "")}/v1/jobs/${encodeURIComponent(jobId)}/events`;
  let last = lastEventId;
  for (let failures = 0; failures <= maxReconnects; failures++) {
    const headers: Record<string, string> = { Authorization: `Bearer ${opts.apiKey}`, Accept: "text/event-stream" };
    if (last !== undefined) headers["Last-Event-ID"] = String(last);
    const res = await doFetch(url, { headers, signal });
    if (res.status === 204) return; // the final event was already delivered
    if (!res.ok || !res.body) {
      throw new Error(`GET ${url}: ${res.status} ${await res.text()}`);
    }
    for await (const msg of sseMessages(res.body)) {
      if (!msg.id || !msg.data || msg.event === "reset" || msg.event === "overflow") continue;
      const ev: JobEvent = { seq: Number(msg.id), event: JSON.parse(msg.data) as StreamEvent };
      last = ev.seq;
      failures = -1; // progress: the next drop is a first failure again
      yield ev;
      if (finalEvents.has(ev.event.type)) return;
    }
  }
  throw new Error(`event stream of ${jobId} keeps closing`);
}

interface SSEMessage {
  id?: string;
  event?: string;
  data?: string;
}

/** sseMessages parses a text/event-stream body into messages. */
async function* sseMessages(body: ReadableStream<Uint8Array>): AsyncGenerator<SSEMessage> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let msg: SSEMessage = {};
  let data: string[] = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let nl: number;
    while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
      if (buf[nl] === "\r" && nl === buf.length - 1) break; // maybe half of a CRLF
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
      if (line === "") {
        if (data.length > 0 || msg.id !== undefined) yield { ...msg, data: data.join("\n") };
        msg = {};
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const v = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "data") data.push(v);
      else if (field === "id") msg.id = v;
      else if (field === "event") msg.event = v;
    }
  }
}
