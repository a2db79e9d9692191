// Package worker runs Ferry job handlers: it consumes the scheduler's
// dispatches for one pool, runs the handler registered for each job's type
// and reports the attempt's lifecycle on Kafka.
//
// # Writing a handler
//
// A handler is a [HandlerFunc]. It receives the attempt as a [*Job] (id,
// tenant, attempt number, type, queue, JSON payload, tags) and returns a
// JSON-encodable result or an error:
//
//	func sendEmail(ctx context.Context, job *worker.Job) (any, error) {
//		var p struct{ To, Subject string }
//		if err := json.Unmarshal(job.Payload, &p); err != nil {
//			return nil, worker.Permanent(err) // retrying will not help
//		}
//		job.Progress(50, "rendered")
//		id, err := mailer.Send(ctx, p.To, p.Subject, job.ID) // job.ID as idempotency key
//		if err != nil {
//			return nil, err // app_error: retried with backoff
//		}
//		return map[string]string{"message_id": id}, nil
//	}
//
// Register handlers on a [Registry]; [BuildWith] makes a service builder
// that runs them beside the built-in handlers of package handlers (http,
// noop, sleep, fail):
//
//	service.Main("worker", worker.Needs, worker.BuildWith(func(r *worker.Registry) {
//		r.Register("email.send", sendEmail)
//	}))
//
// # Failure classes
//
// The error a handler returns decides what the scheduler does next:
//
//   - a plain error is app_error: retried with exponential backoff while
//     attempts remain;
//   - [Permanent](err) is dead-lettered at once;
//   - [Retryable](err, retryAfter) is retried no sooner than retryAfter;
//   - an error wrapping context.DeadlineExceeded, or any error returned after
//     the job's timeout expired, is timeout (one more try, then dead letter);
//   - a handler stopped because its job was cancelled is reported as
//     cancelled; a panic is an app_error.
//
// # Delivery guarantees
//
// Delivery is at-least-once: a worker that dies mid-job loses its lease and
// the job runs again. Use Job.ID and Job.Attempt as idempotency keys for
// side effects. The worker adds an effectively-once check on top: it drops a
// dispatch of a job it has already completed (it remembers recent
// completions), of a job it is running, and of a dispatch older than one it
// already ran.
//
// # What a job produces
//
// For each attempt a worker produces, keyed by job id:
//
//   - started, at once;
//   - progress on Job.Progress (at most one event per ~100 ms per job, the
//     last report always sent) and as a heartbeat every Config.Heartbeat,
//     which extends the job's lease;
//   - completed (with the result, at most Config.MaxResultBytes of JSON) or
//     failed (class, message and retry_after). The slot is free only once
//     this event is acknowledged.
//
// Everything a handler returns is made storable by every projection first
// (Postgres text and jsonb hold no NUL and only valid UTF-8): in a result,
// NUL in strings and keys becomes U+FFFD and a number beyond float64's
// range its text (the job still completes: its work is done); error and
// progress messages become valid UTF-8 without NUL, at most 4096 and 1024
// bytes.
//
// The worker also announces its slots on the workers topic
// (schema.WorkerStatus) at start, every second, on every rebalance and when
// it stops, with the job types of its registry and the dispatch partitions
// it owns; the scheduler dispatches only while the pool has free slots, and
// a job only to a partition owned by a worker that handles its type. A
// dispatch of a type the registry lacks (its partition just moved here) is
// rejected in an announcement, never run nor failed: the scheduler
// re-queues it at the same attempt. Several workers with different
// registries may so serve one pool (docs/workers.md).
//
// # Stopping
//
// When Run's context is done the worker stops fetching, lets running
// handlers finish within Config.Grace, cancels the rest, and hands them back
// together with every dispatch it had fetched but not started in a final
// WorkerStatus (Stopping, HandedBack) so the scheduler re-dispatches them at
// once. It then flushes its events, commits its offsets and returns.
package worker
