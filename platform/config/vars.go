// Package config reads Ferry's settings from environment variables.
//
// Every variable any Ferry process reads is declared once in [Vars], with
// its default and a sentence of documentation; docs/configuration.md and the
// compose files are checked against this table. main reads the environment
// once through a [Loader] and passes typed config structs down.
package config

// Var is one environment variable Ferry understands.
type Var struct {
	Name    string
	Default string
	Doc     string
}

// Vars is every environment variable Ferry reads. Defaults are the ones
// `ferry dev` uses.
var Vars = []Var{
	// Shared by every service.
	{"FERRY_HTTP_ADDR", "127.0.0.1:8080", "Address the HTTP server listens on (the single front door in `ferry dev`)."},
	{"FERRY_KAFKA_BROKERS", "127.0.0.1:9092", "Comma-separated Kafka seed brokers. Unset in `ferry dev`: an embedded broker is started."},
	{"FERRY_TOPIC_PREFIX", "ferry.", "Prefix of every topic name."},
	{"FERRY_TOPIC_PARTITIONS", "8", "Partitions per topic when Ferry creates its topics (the dispatch topics: FERRY_DISPATCH_PARTITIONS). `ferry dev` with its embedded broker uses 1: its one process is the one member of the scheduler's and every projection's consumer group."},
	{"FERRY_DISPATCH_PARTITIONS", "", "Partitions of each pool's dispatch topic when Ferry creates it; they bound the pool's workers (a worker that owns no partition gets no jobs). Unset: FERRY_TOPIC_PARTITIONS, or 8 in `ferry dev` with its embedded broker (where your own workers join the built-in one)."},
	{"FERRY_TOPIC_RETENTION", "168h", "Retention of lifecycle and dispatch topics when Ferry creates them."},
	{"FERRY_KAFKA_LINGER", "0s", "Producer linger. 0 sends as soon as possible; batches still form under load while requests are in flight."},
	{"FERRY_TOPIC_REPLICATION", "3", "Replication factor of topics Ferry creates. `ferry dev` uses 1 (one embedded broker)."},
	{"FERRY_TOPIC_MIN_INSYNC", "2", "min.insync.replicas of topics Ferry creates: replicas that must have a record before acks=all acknowledges it. `ferry dev` uses 1."},
	{"FERRY_ENV", "development", "development or production. Production refuses to start when a Ferry topic would lose acknowledged records on one broker failure (replication factor < 2, min.insync.replicas < 2, or min.insync.replicas > replication factor); development logs a warning."},
	{"FERRY_KAFKA_TLS", "false", "Connect to the brokers over TLS. Implied by any other FERRY_KAFKA_TLS_* setting."},
	{"FERRY_KAFKA_TLS_CA_FILE", "", "PEM file of the CA(s) that sign the broker certificates. Unset: the system roots."},
	{"FERRY_KAFKA_TLS_CERT_FILE", "", "PEM client certificate for mutual TLS (with FERRY_KAFKA_TLS_KEY_FILE)."},
	{"FERRY_KAFKA_TLS_KEY_FILE", "", "PEM private key of FERRY_KAFKA_TLS_CERT_FILE."},
	{"FERRY_KAFKA_TLS_SERVER_NAME", "", "Name the broker certificates must carry, when it differs from the host in FERRY_KAFKA_BROKERS."},
	{"FERRY_KAFKA_TLS_INSECURE_SKIP_VERIFY", "false", "Accept any broker certificate (no verification). Logged as a warning at every start; never use it in production."},
	{"FERRY_KAFKA_SASL_MECHANISM", "", "SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER. Unset: no SASL."},
	{"FERRY_KAFKA_SASL_USERNAME", "", "SASL user (PLAIN and SCRAM)."},
	{"FERRY_KAFKA_SASL_PASSWORD", "", "SASL password (PLAIN and SCRAM). Prefer FERRY_KAFKA_SASL_PASSWORD_FILE; never logged."},
	{"FERRY_KAFKA_SASL_PASSWORD_FILE", "", "File holding the SASL password (trailing newline ignored), re-read at each authentication so a rotated secret is picked up."},
	{"FERRY_KAFKA_SASL_TOKEN_FILE", "", "File holding the OAUTHBEARER token, re-read at each authentication (a sidecar keeps it fresh)."},
	{"FERRY_POSTGRES_URL", "", "Postgres connection URL. Unset in `ferry dev`: a local Postgres is started under FERRY_DATA_DIR."},
	{"FERRY_POSTGRES_MAX_CONNS", "16", "Maximum connections in each service's Postgres pool."},
	{"FERRY_POSTGRES_MIGRATE", "true", "Apply schema migrations at start. false: only check they are applied (by `ferry migrate up` as the schema owner) and refuse to start if not, so services can run as a role without DDL rights."},
	{"FERRY_REDIS_URL", "", "Redis URL. Unset in `ferry dev`: a local Redis is started under FERRY_DATA_DIR."},
	{"FERRY_REDIS_USERNAME", "", "Redis ACL user. Unset: the user in FERRY_REDIS_URL, if any, else `default`."},
	{"FERRY_REDIS_PASSWORD", "", "Redis ACL password (overrides one in FERRY_REDIS_URL). Prefer FERRY_REDIS_PASSWORD_FILE; never logged."},
	{"FERRY_REDIS_PASSWORD_FILE", "", "File holding the Redis password (trailing newline ignored), re-read at each new connection so a rotated secret is picked up."},
	{"FERRY_REDIS_TLS", "false", "Connect to Redis (and its sentinels) over TLS. Implied by a rediss:// URL and by any other FERRY_REDIS_TLS_* setting."},
	{"FERRY_REDIS_TLS_CA_FILE", "", "PEM file of the CA(s) that sign the Redis server certificates. Unset: the system roots."},
	{"FERRY_REDIS_TLS_CERT_FILE", "", "PEM client certificate for Redis mutual TLS (with FERRY_REDIS_TLS_KEY_FILE)."},
	{"FERRY_REDIS_TLS_KEY_FILE", "", "PEM private key of FERRY_REDIS_TLS_CERT_FILE."},
	{"FERRY_REDIS_TLS_SERVER_NAME", "", "Name the Redis server certificates must carry. Unset: the host dialled (with Sentinel, the master's announced address)."},
	{"FERRY_REDIS_SENTINEL_ADDRS", "", "Comma-separated Redis Sentinel addresses (host:port). Set: Ferry asks them for the master FERRY_REDIS_SENTINEL_MASTER and follows failovers; FERRY_REDIS_URL then only supplies the database number and credentials, and may be unset."},
	{"FERRY_REDIS_SENTINEL_MASTER", "", "Name of the master the sentinels monitor (`sentinel monitor <name> ...`)."},
	{"FERRY_REDIS_SENTINEL_PASSWORD", "", "Password of the sentinels themselves (their `requirepass`), if any; never logged."},
	{"FERRY_REDIS_SENTINEL_PASSWORD_FILE", "", "File holding FERRY_REDIS_SENTINEL_PASSWORD, read at start."},
	{"FERRY_DATA_DIR", ".ferry", "Where `ferry dev` keeps Kafka, Postgres and Redis data."},
	{"FERRY_ADMIN_KEY", "", "Bearer key for operator routes. Generated and printed by `ferry dev` when unset; required elsewhere for admin routes."},
	{"FERRY_DEV_API_KEY", "", "API key of the `default` tenant that `ferry dev` bootstraps. Generated, printed and written to FERRY_DATA_DIR/dev-api-key when unset."},
	{"FERRY_OUTBOUND_ALLOW", "", "Comma-separated CIDRs the `http` handler and webhooks may reach despite the SSRF guard. `ferry dev` defaults to 127.0.0.0/8."},
	{"FERRY_LOG_LEVEL", "info", "Log level: debug, info, warn or error."},
	{"FERRY_SHUTDOWN_TIMEOUT", "30s", "How long a service may take to stop after SIGTERM."},
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "", "OTLP/gRPC endpoint for traces. Unset: traces are kept in-process only (trace ids still propagate)."},
	{"OTEL_SERVICE_NAME", "", "Overrides the service name reported to OpenTelemetry."},

	// The `ferry` CLI.
	{"FERRY_URL", "http://127.0.0.1:8080", "Base URL the `ferry jobs` commands call."},
	{"FERRY_API_KEY", "", "API key the `ferry jobs` commands send. Unset: the key in FERRY_DATA_DIR/dev-api-key, if any."},

	// `ferry dev` only.
	{"FERRY_DEV_POSTGRES_PORT", "5433", "Port of the Postgres that `ferry dev` starts."},
	{"FERRY_DEV_REDIS_PORT", "6380", "Port of the Redis that `ferry dev` starts."},
	{"FERRY_DEV_KAFKA_ADDR", "127.0.0.1:9092", "Listen address of the embedded Kafka broker of `ferry dev`."},

	// api.
	{"FERRY_API_IDEMPOTENCY_TTL", "24h", "How long an Idempotency-Key is remembered in Redis (the status projection keeps it for the job's lifetime)."},
	{"FERRY_API_IDEMPOTENCY_CLAIM_TTL", "10s", "Lease of an Idempotency-Key while its request is in flight: if the api dies holding it, retries answer 409 for at most this long, then take the key over with the same job id."},
	{"FERRY_API_TEST_PAUSE_AT", "", "Test only: hold keyed submissions at a point of the idempotency flow (claimed, produced) so the chaos suite can kill the api there. Never set in production."},
	{"FERRY_API_MAX_ATTEMPTS_TYPES", "", "Default max_attempts per job type for jobs that do not set it, comma-separated type=N (e.g. email.send=10); other types default to 5."},
	{"FERRY_API_MAX_PAYLOAD_BYTES", "262144", "Largest accepted job payload, as encoded in the job's event (compact JSON, '<', '>' and '&' escaped as 6 bytes each)."},
	{"FERRY_API_MAX_DELAY", "144h", "How far ahead a job's run_at, delay or retry backoff may reach (422 run_at_too_far beyond); must be below FERRY_TOPIC_RETENTION, checked at startup."},
	{"FERRY_API_DEFAULT_MAX_QUEUED", "100000", "max_queued of tenants without their own: jobs waiting to run (each held in Redis); past it submissions get 429 tenant_queue_full."},
	{"FERRY_API_DEFAULT_MAX_QUEUES", "100", "max_queues of tenants without their own: distinct queues with unfinished jobs; a job in a new queue past it gets 429 too_many_queues."},
	{"FERRY_JOB_RETENTION", "720h", "How long a finished job (succeeded, dead, cancelled) stays in the status projection (GET /v1/jobs/{id}, the durable idempotency backstop); older ones are deleted in batches. At least 1h."},
	// api: the group commit of submissions (docs/performance.md).
	{"FERRY_API_PRODUCE_INFLIGHT", "4", "Most produce calls of submissions the api has in flight at once; submissions arriving while all are busy go out together in the next (a group commit). Higher: a submission waits less under load, in more, smaller produce requests. At least 1."},
	// api: type-aware routing (docs/workers.md).
	{"FERRY_API_UNKNOWN_TYPES", "accept", "accept or reject: with reject, a job whose type no worker of its pool announced within FERRY_API_KNOWN_TYPES_WINDOW gets 422 unknown_job_type. accept queues it; it waits (its resource says why) until a worker for its type starts."},
	{"FERRY_API_KNOWN_TYPES_WINDOW", "10m", "How long a job type counts as known after a worker last announced it (FERRY_API_UNKNOWN_TYPES=reject), so a restarting worker does not make its types unknown."},
	{"FERRY_HTTP_SIGNING_SECRET_GRACE", "24h", "After POST /v1/http-signing/secret/rotate, how long the tenant's old secret keeps signing its http jobs' requests alongside the new one."},

	// console (served by the api at /console).
	{"FERRY_CONSOLE_SESSION_TTL", "12h", "How long a web console sign-in lasts before the key must be entered again. At least 1m."},
	// api: cron schedules.
	{"FERRY_SCHEDULES_FIRING", "true", "Whether this api replica runs the schedules firing loop (false: it serves the schedule routes but fires nothing)."},
	{"FERRY_SCHEDULES_MISFIRE_GRACE", "5s", "How late a schedule's latest fire time may be and still count as on time under catch-up skip."},
	{"FERRY_SCHEDULES_MAX_PER_TENANT", "100", "Schedules a tenant may have; past it POST /v1/schedules gets 422 too_many_schedules."},

	// scheduler.
	{"FERRY_SCHEDULER_LEASE", "30s", "Lease a dispatched job holds; started and progress events extend it."},
	{"FERRY_SCHEDULER_PREFETCH", "16", "Dispatches allowed beyond the pool's free slots, so workers never idle between jobs. 0: only into free slots."},
	{"FERRY_SCHEDULER_PREFETCH_WINDOW", "100ms", "On top of the prefetch, a pool may have as many dispatches beyond its slots as it dispatched in this last window (rate × window), so the window covers the dispatch round trip; slow pools stay at the prefetch. Short jobs may go further: a job whose run-time estimate is e while fewer than slots × window / e dispatches are beyond the slots and prefetch, so about this much expected work waits per slot. Negative disables both."},
	{"FERRY_SCHEDULER_PREFETCH_MAX", "2048", "Bound of each of the rate-sized and the work-sized parts of a pool's dispatch window (FERRY_SCHEDULER_PREFETCH_WINDOW)."},
	{"FERRY_SCHEDULER_MAX_POLL", "500", "Most records the scheduler applies in one Redis script call. Redis runs one script at a time: a larger batch costs fewer calls under a backlog but holds Redis longer, and dispatch steps and submissions wait behind it."},
	{"FERRY_SCHEDULER_TICK", "5ms", "The fallback period of the scheduler's dispatch loops while jobs flow (wakes and due times drive them; the tick only bounds a missed wake). A pool whose steps dispatch nothing doubles it per empty step, up to 100ms."},
	{"FERRY_SCHEDULER_LOOKAHEAD", "2s", "Delayed jobs (run_at, retries) due within this are dispatched ahead, up to what the pool's workers hold (FERRY_WORKER_HOLD), with their due time as not_before, which the worker honours: a burst due at one instant starts on time, never early. Jobs behind a concurrency key, rate limit, max_running, paused queue or open breaker wait until due. 0 disables; must be < FERRY_SCHEDULER_LEASE (unset, it is at most half the lease)."},
	{"FERRY_SCHEDULER_RETRY_BASE", "1s", "First retry backoff of app_error/retryable/timeout failures: min(base·2^(n-1), max) ±25 % jitter. A job's backoff overrides it."},
	{"FERRY_SCHEDULER_RETRY_MAX", "10m", "Cap of the exponential retry backoff. A job's backoff overrides it."},
	{"FERRY_SCHEDULER_RETRY_TYPES", "", "Per job type retry backoff, comma-separated type=base/max (e.g. email.send=5s/1h); between the scheduler defaults and a job's own backoff."},
	{"FERRY_SCHEDULER_QUEUE_IDLE", "1m", "How long an empty queue stays in the scheduler's indexes, GET /v1/queues and the queue gauges; empty queues are swept this often and leave on the second sweep that finds them empty."},
	{"FERRY_SCHEDULER_CHECKPOINT_INTERVAL", "1s", "How often the scheduler stamps a checkpoint in Redis and Postgres; a Redis whose checkpoint is behind Postgres's went back in time (restored or failed over) and is rebuilt from the log."},

	// sse-bridge.
	{"FERRY_SSE_RETENTION", "24h", "How long the sse-bridge keeps events for Last-Event-ID resumption; older positions get an `event: reset`."},
	{"FERRY_SSE_KEEPALIVE", "15s", "Interval of the keep-alive comments on idle SSE streams."},
	{"FERRY_SSE_BUFFER", "256", "Events buffered per SSE client; a client further behind gets `event: overflow` and is disconnected."},
	{"FERRY_SSE_MAX_STREAMS", "100", "Open SSE streams one tenant may have in one sse-bridge process; one more gets 429 too_many_streams."},
	{"FERRY_SSE_KEY_CHECK", "2s", "How often the sse-bridge checks the API keys of open streams in Postgres: a stream of a revoked key (or disabled tenant) ends within this interval."},
	{"FERRY_SSE_ORDER_HOLD", "3s", "Longest an SSE event waits for its predecessor (completed for started, started for enqueued) when topics deliver them out of order; negative disables."},
	// The sse-bridge's in-memory event log (docs/sse.md, "Resuming").
	{"FERRY_SSE_LOG_SIZE", "50000", "Events one sse-bridge process keeps in memory for Last-Event-ID resumption and job-history replay; older positions get an `event: reset`."},

	// webhooks.
	{"FERRY_SECRET_KEY", "", "Base64 of 32 random bytes (`openssl rand -base64 32`): the AES-256-GCM key that encrypts webhook and http-job signing secrets at rest; the api, every worker and webhooks need the same key. Unset: a key is generated once into FERRY_DATA_DIR/secret-key (dev only; set it in production, and keep it: losing it makes stored secrets unreadable)."},
	{"FERRY_WEBHOOKS_TIMEOUT", "10s", "Timeout of one webhook delivery request (connect, headers and bounded body read)."},
	{"FERRY_WEBHOOKS_BACKOFF", "5s,30s,2m,10m,30m,1h,2h,4h,8h", "Waits before each webhook retry (±20 % jitter); a delivery fails for good after one attempt more than this list is long."},
	{"FERRY_WEBHOOKS_CONCURRENCY", "64", "Webhook requests in flight at once per webhooks replica."},
	{"FERRY_WEBHOOKS_ENDPOINT_CONCURRENCY", "4", "Webhook requests in flight at once to one endpoint per replica, so a slow endpoint never holds every slot."},
	{"FERRY_WEBHOOKS_DISABLE_AFTER", "24h", "An endpoint whose deliveries have all failed for this long is disabled (410 Gone disables at once)."},
	{"FERRY_WEBHOOKS_SECRET_GRACE", "24h", "After a secret rotation, how long the old secret keeps signing alongside the new one."},
	{"FERRY_WEBHOOKS_RETENTION", "720h", "How long the webhooks service keeps a finished (delivered, failed, cancelled) delivery and its attempts, and a job's queue and type after it was last seen or due to run; pending deliveries are never deleted."},
	{"FERRY_WEBHOOKS_MAX_ENDPOINTS", "50", "max_webhook_endpoints of tenants without their own: webhook endpoints a tenant may have; past it POST /v1/webhooks answers 409 too_many_endpoints."},

	// dlq.
	{"FERRY_DLQ_RETENTION", "720h", "How long the dlq service keeps an entry after its job was dead-lettered."},
	{"FERRY_DLQ_REDRIVE_RATE", "500", "Bulk re-drives enqueue at most this many jobs per second per dlq process."},

	// worker.
	{"FERRY_WORKER_POOL", "short", "Pool this worker serves: short or long."},
	{"FERRY_WORKER_CONCURRENCY", "64", "Handlers a worker runs at once."},
	{"FERRY_WORKER_HOLD", "10000", "Dispatches leased ahead of their due time (FERRY_SCHEDULER_LOOKAHEAD) a worker keeps waiting outside its handler slots; the scheduler leases at most the sum its pool's workers announce ahead. 0: none (a dispatch leased ahead that reaches this worker waits in a slot)."},
	{"FERRY_WORKER_ID", "", "Stable worker id. Defaults to hostname-pid."},
	{"FERRY_WORKER_GRACE", "25s", "On SIGTERM, how long running handlers may take to finish before their jobs are handed back."},
	{"FERRY_WORKER_HEARTBEAT", "5s", "How often a running handler heartbeats (extends its lease)."},

	// The built-in worker of `ferry dev` (worker.BuildPools).
	{"FERRY_DEV_WORKER_POOLS", "short,long", "Pools the built-in worker of `ferry dev` serves, comma-separated, or `none`. Leave a pool out to make a worker of your own its only worker (see examples/)."},

	// The all-in-one process (cmd/ferry's stack): its projections' reader.
	{"FERRY_DEV_SHARED_PROJECTIONS", "true", "One Kafka reader (consumer group ferry-projections) feeds every Postgres projection of the all-in-one process (api status, dlq, audit, webhooks), each still storing its own offsets; false gives each its own consumer group, as separate services have."},

	// worker: async http jobs (callbacks to the api).
	{"FERRY_CALLBACK_URL", "", "The api's base URL as the receivers of async http jobs reach it; their requests carry <it>/v1/jobs/<id>/callback. `ferry dev` defaults to its own address. Unset: async http jobs fail permanent."},
	{"FERRY_HTTP_ASYNC_LEASE", "5m", "Lease of an async http job whose payload sets none: how long its receiver may go between two reports (1s to 24h)."},
	{"FERRY_HTTP_CALLBACK_TOKEN_TTL", "24h", "How long an async http job's callback token is valid: the longest an attempt may be held by its receiver in all."},

	// audit.
	{"FERRY_AUDIT_RETENTION", "8760h", "How long audit rows are kept; whole monthly partitions older than this are dropped."},
	{"FERRY_AUDIT_EXPORT_CONCURRENCY", "2", "Audit exports one tenant may run at once per audit replica; more answer 429 too_many_exports."},
	{"FERRY_AUDIT_EXPORT_WRITE_TIMEOUT", "30s", "How long one write of an audit export may wait for the client to read; a client that stalls longer is cut off. No Postgres connection is held while writing."},
}

// Lookup returns the declaration of name.
func Lookup(name string) (Var, bool) {
	for _, v := range Vars {
		if v.Name == name {
			return v, true
		}
	}
	return Var{}, false
}
