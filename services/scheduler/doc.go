// Package scheduler is Ferry's scheduler service (docs/design.md §4).
//
// It consumes the lifecycle topics (enqueued, started, progress, completed,
// failed, cancelled) and worker announcements (ferry.workers) in the consumer
// group ferry-scheduler, keeps the queue state in Redis and hands jobs to the
// worker pools on ferry.jobs.dispatch.<pool> while the pool has free slots
// (plus a small prefetch). It also decides what happens after a failed
// attempt: a retry (a new enqueued event, attempt n+1, run_at = finished_at +
// backoff) or the dead-letter queue (a dlq event with the job's full history).
//
// # Delivery
//
// Processing is at-least-once: offsets are committed only after the Redis
// effects of a polled batch are applied and the records it produced are
// acknowledged. Every Redis mutation is a Lua script that ignores repeats and
// stale events, so a replayed batch changes nothing. Jobs are dispatched
// at least once: a dispatch whose worker dies is re-dispatched when its lease
// expires (worker_lost, without using an attempt). A job seen completed is
// never dispatched again.
//
// # Replicas
//
// Any number of schedulers may run against one Redis: each runs its own
// dispatch loop per pool, and the atomicity of the scripts alone keeps a job
// from being handed out twice. No leader is needed.
//
// # Fair share and queue controls
//
// Which ready job goes next is decided inside the dispatch script: the
// tenant with the least virtual time (weighted slot-time, estimated per
// tenant and job type and reconciled on completion) that is under its
// max_running and has a job in a queue it has not paused, then that
// tenant's best job by priority and FIFO (internal/qstore/fair.go,
// docs/tenancy.md). Tenant weights, max_running and paused queues come from
// Postgres (tenants.go); the scheduler serves GET /v1/queues and the
// per-tenant pause and resume routes (queues.go).
//
// # Latency
//
// The consumer wakes the dispatch loops as soon as a batch makes a job
// dispatchable or frees a slot. A loop also wakes at the next delayed due
// time or lease deadline Redis reports, and on a fallback tick
// (FERRY_SCHEDULER_TICK, doubling per empty step up to idleTickMax while a
// pool has nothing to dispatch). Delayed jobs are stored by due time rounded up to
// the millisecond, so none is dispatched early.
package scheduler
