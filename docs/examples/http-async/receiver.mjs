// An async receiver of Ferry http jobs, with node's standard library only
// (docs/http-jobs.md, "Async completion"). It verifies each request's
// signature, answers 202 Accepted at once, then does the work on timers: it
// reports progress through the job's callback URL (each report also extends
// the lease) and completes the job with its result.
//
// The job's body says how much work there is: {"steps": 3, "step_ms": 200}.
//
//     FERRY_SIGNING_SECRET=whsec_... PORT=8000 node receiver.mjs
//
// It prints "listening http://127.0.0.1:<port>" once it serves (PORT=0 picks
// a free port). Needs node 18 or later (fetch).
import { createServer } from "node:http";
import { setTimeout as sleep } from "node:timers/promises";
import { verify } from "../http-signing/verify.mjs"; // the function docs/http-jobs.md shows

const secret = process.env.FERRY_SIGNING_SECRET;

// report POSTs one report to the job's callback route and returns the HTTP
// status. 409 attempt_superseded means: this attempt no longer holds the
// job (a newer one does, or the job finished or was cancelled): stop working.
async function report(base, token, action, body) {
  const res = await fetch(`${base}/${action}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  await res.arrayBuffer();
  return res.status;
}

// work is the job itself: a few steps, each reported as progress well
// within the lease, then the result.
async function work(base, token, lease, job) {
  const steps = job.steps ?? 3;
  const step = job.step_ms ?? 200;
  if (step >= (lease * 1000) / 3) throw new Error("report at least three times per lease");
  for (let i = 0; i < steps; i++) {
    await sleep(step);
    const percent = (100 * (i + 1)) / (steps + 1);
    if ((await report(base, token, "progress", { percent, message: `step ${i + 1} of ${steps}` })) === 409) {
      return; // superseded or cancelled: stop
    }
  }
  await report(base, token, "complete", { result: { steps, receiver: "node" } });
}

const server = createServer(async (req, res) => {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const body = Buffer.concat(chunks);
  try {
    verify(secret, req.headers, body); // node lower-cases header names
  } catch (e) {
    res.writeHead(401).end(e.message);
    return;
  }
  const base = req.headers["ferry-callback-url"];
  const token = req.headers["ferry-callback-token"];
  const lease = Number(req.headers["ferry-callback-lease"]);
  res.writeHead(202).end();
  work(base, token, lease, JSON.parse(body.length ? body : "{}")).catch((e) => console.error("job failed:", e.message));
});

server.listen(Number(process.env.PORT ?? 8000), "127.0.0.1", () => {
  console.log(`listening http://127.0.0.1:${server.address().port}`);
});
