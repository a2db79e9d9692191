// Package handlers holds the worker's built-in job handlers, registered by
// worker.Build under these job types:
//
//   - http: calls an HTTP endpoint through the SSRF guard of
//     platform/outbound. Payload:
//     {"method": "POST", "url": "https://…", "headers": {"K": "v"},
//     "body": "text" or any JSON value, "timeout": "10s"}.
//     The request carries Ferry-Job-Id, Ferry-Attempt and Ferry-Tenant
//     headers, which the receiver can use as idempotency keys (delivery is
//     at-least-once), and the Standard Webhooks webhook-id
//     (<job id>_a<attempt>), webhook-timestamp and — once the tenant has a
//     signing secret (POST /v1/http-signing/secret/rotate) —
//     webhook-signature headers; docs/http-jobs.md shows how to verify them.
//     A 2xx answer completes the job with {"status", "headers", "body"}
//     (the body bounded to 64 KiB, as JSON when the response is JSON that
//     Postgres jsonb can store, else as a string when it is UTF-8 text
//     without NUL, else — binary, other encodings, NUL bytes — as
//     {"body_base64": "<standard base64>", "encoding": "base64"} instead of
//     "body"; "truncated": true when cut). Error texts quoting a response
//     are made valid UTF-8 without NUL. 408, 429, 5xx and
//     network errors are retryable, honouring Retry-After (seconds or an
//     HTTP date); other 4xx, an invalid payload and an address refused by
//     the SSRF guard are permanent; the request timeout is a timeout.
//     With "async": true (and an optional "lease": "2m") the request also
//     carries Ferry-Callback-Url, Ferry-Callback-Token and
//     Ferry-Callback-Lease, and a 202 answer hands the attempt to the
//     receiver (workertype.Detached), which reports through the api's
//     callback routes (platform/callback; docs/http-jobs.md).
//
// The other three are test and demo handlers, for trying Ferry out and for
// Ferry's own tests; production jobs should not rely on them:
//
//   - noop: completes at once with no result.
//   - sleep: {"ms": N} sleeps N milliseconds, reporting progress every 10 %
//     (at most every 100 ms), and stops early when cancelled.
//   - fail: {"times": N, "class": "app_error|permanent|timeout|retryable",
//     "retry_after": "1s", "message": "…"} fails attempts 1…N with that
//     class (default app_error; N defaults to 1), then completes with
//     {"attempt": n}.
package handlers
