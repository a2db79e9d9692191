// Package jobs is the one home of Ferry's job domain, the rules every
// service and the CLI share about a job apart from its events:
//
//   - the public job resource ([Job]) and how a new job's resource is built
//     ([Submitted]); the api builds it from its status rows, which only it
//     holds;
//   - submission validation with its limits and defaults ([Validate],
//     [Request], [Limits]);
//   - job ids: minted ([NewID]), derived from a key ([DerivedID]) and their
//     age ([MintedBefore]);
//   - the name rules of types, queues and concurrency keys ([ValidType],
//     [ValidQueue], [ValidConcurrencyKey]) and the defaults of queue and
//     pool ([QueueOf], [PoolOf]);
//   - attempt limits ([DefaultMaxAttempts], [MaxMaxAttempts]);
//   - the payload limit, on submission and on re-drive (payload.go);
//   - a tenant's settings read as typed submission limits ([TenantLimits],
//     [LimitsReader]).
//
// Failure classes are part of the wire contract and stay in events/schema
// ([schema.ErrorClass]); so does the job specification an event carries
// ([schema.JobSpec]).
//
// # Why platform, not events/schema
//
// events/schema is the wire contract: the events on Kafka, which every
// consumer of the log may read. The rules here are the HTTP side of a job:
// the resource clients see, what a submission may hold and how a tenant's
// settings bound it. Those need the tenant settings of platform/auth and
// the error shape of platform/httpx, which events/schema must not depend
// on. Every module that applies them (api, dlq, scheduler, worker, the
// ferry command) already depends on platform. The public Go client
// (module client) uses the standard library only, so it keeps its own
// mirror of [Job]; a test of the ferry command checks that the two agree
// field for field.
package jobs
