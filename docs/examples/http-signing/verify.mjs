// Checks the Standard Webhooks signature of a request Ferry's http handler
// sent (docs/http-jobs.md), with node:crypto only. As a command it reads the
// secret from FERRY_SIGNING_SECRET, the headers from WEBHOOK_ID,
// WEBHOOK_TIMESTAMP and WEBHOOK_SIGNATURE, the raw body from stdin, and
// prints "verified" or fails. In a server, call verify with req.headers
// (node lower-cases their names) and the raw body as a Buffer.
import { createHmac, timingSafeEqual } from "node:crypto";
import { pathToFileURL } from "node:url";

// BEGIN verify

// verify throws unless the request comes from Ferry: its timestamp is within
// 5 minutes of now (a replayed request is refused), and one of the
// signatures is the HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>"
// under the secret, compared in constant time.
export function verify(secret, headers, body, now = Date.now()) {
  const tolerance = 5 * 60; // seconds
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const id = headers["webhook-id"] ?? "";
  const ts = headers["webhook-timestamp"] ?? "";
  if (!/^\d+$/.test(ts) || Math.abs(now / 1000 - Number(ts)) > tolerance) {
    throw new Error("timestamp outside the tolerance");
  }
  const want = createHmac("sha256", key).update(`${id}.${ts}.`).update(body).digest();
  for (const sig of (headers["webhook-signature"] ?? "").split(" ")) {
    const [version, b64 = ""] = sig.split(",");
    const got = Buffer.from(b64, "base64");
    if (version === "v1" && got.length === want.length && timingSafeEqual(got, want)) {
      return;
    }
  }
  throw new Error("no valid signature");
}

// END verify

if (import.meta.url === pathToFileURL(process.argv[1]).href) {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const headers = {
    "webhook-id": process.env.WEBHOOK_ID,
    "webhook-timestamp": process.env.WEBHOOK_TIMESTAMP,
    "webhook-signature": process.env.WEBHOOK_SIGNATURE,
  };
  try {
    verify(process.env.FERRY_SIGNING_SECRET ?? "", headers, Buffer.concat(chunks));
    console.log("verified");
  } catch (err) {
    console.error(err.message);
    process.exit(1);
  }
}
