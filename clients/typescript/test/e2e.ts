// End-to-end check of the TypeScript client against a running Ferry
// (FERRY_URL, FERRY_API_KEY): submit with an Idempotency-Key (twice: one
// job), get, list by tag, follow the job's events until it completes, and
// read it succeeded. cmd/ferry's TestTypeScriptClient runs it.
import { createFerryClient, jobEvents, newIdempotencyKey, type FerryOptions } from "../src/index.js";

declare const process: { env: Record<string, string | undefined>; exitCode?: number };

function check(ok: boolean, what: string): void {
  if (!ok) throw new Error("check failed: " + what);
}

async function main(): Promise<void> {
  const opts: FerryOptions = { baseUrl: process.env.FERRY_URL ?? "", apiKey: process.env.FERRY_API_KEY ?? "" };
  const ferry = createFerryClient(opts);
  const key = newIdempotencyKey();
  const tag = "ts-e2e-" + key.slice(-8);
  const body = { type: "sleep", payload: { ms: 300 }, tags: [tag] };

  const first = await ferry.POST("/v1/jobs", { params: { header: { "Idempotency-Key": key } }, body });
  check(first.response.status === 202 && first.data !== undefined, `submit: ${first.response.status} ${JSON.stringify(first.error)}`);
  const id = first.data!.id;
  const again = await ferry.POST("/v1/jobs", { params: { header: { "Idempotency-Key": key } }, body });
  check(again.response.status === 200 && again.data?.id === id, `same key again: ${again.response.status} ${again.data?.id}`);

  const got = await ferry.GET("/v1/jobs/{id}", { params: { path: { id } } });
  check(got.data?.id === id && got.data.type === "sleep", `get: ${JSON.stringify(got.data)}`);
  const missing = await ferry.GET("/v1/jobs/{id}", { params: { path: { id: "job_00000000-0000-7000-8000-000000000000" } } });
  check(missing.response.status === 404 && missing.error?.error.code === "not_found", `get unknown: ${missing.response.status}`);

  // Lists read the status projection, which follows the log a moment
  // behind the 202 (GET of a just-submitted job is served from a cache).
  let list = await ferry.GET("/v1/jobs", { params: { query: { tag: [tag] } } });
  for (let i = 0; i < 100 && list.data?.jobs.length === 0; i++) {
    await new Promise((r) => setTimeout(r, 100));
    list = await ferry.GET("/v1/jobs", { params: { query: { tag: [tag] } } });
  }
  check(list.data?.jobs.length === 1 && list.data.jobs[0].id === id, `list by tag: ${JSON.stringify(list.data)}`);

  const seen: string[] = [];
  for await (const ev of jobEvents(opts, id)) {
    check(ev.event.job_id === id && ev.seq > 0, `event ${JSON.stringify(ev)}`);
    seen.push(ev.event.type);
  }
  check(seen[0] === "enqueued" && seen.includes("started") && seen[seen.length - 1] === "completed", `events ${seen}`);

  // The status projection shows the completion a moment after the stream.
  let status = "";
  for (let i = 0; i < 100 && status !== "succeeded"; i++) {
    const { data } = await ferry.GET("/v1/jobs/{id}", { params: { path: { id } } });
    status = data?.status ?? "";
    if (status !== "succeeded") await new Promise((r) => setTimeout(r, 100));
  }
  check(status === "succeeded", `final status ${status}`);
  console.log(JSON.stringify({ ok: true, id, events: seen }));
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
