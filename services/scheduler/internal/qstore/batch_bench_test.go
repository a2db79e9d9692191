package qstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/events/schema"
)

// BenchmarkLifecycleByBatch runs a plain job's life in the scheduler's
// scripts (enqueue, one dispatch step, started and completed) in batches
// of 1, 4, 32 and 256 jobs, and reports what Redis spent per job: the
// script time Redis measured itself (INFO commandstats, usec of FCALL),
// the script calls and the commands they ran. At 1,000 jobs/s the
// scheduler's batches hold a few jobs, at full load hundreds:
// docs/performance.md (Round 14) sets these figures beside Redis's cost
// per job in the bench at 1k/s. Needs FERRY_TEST_REDIS_URL, as every test here.
//
//	go test -run '^$' -bench LifecycleByBatch ./internal/qstore
func BenchmarkLifecycleByBatch(b *testing.B) {
	for _, size := range []int{1, 4, 32, 256} {
		b.Run("batch="+strconv.Itoa(size), func(b *testing.B) {
			ctx := context.Background()
			rdb, s := openStore(b, Options{Lease: 10 * time.Second, Prefix: fmt.Sprintf("bench%d:%d:", size, time.Now().UnixNano())})
			now := time.Now()
			var w Batch
			w.Worker(schema.WorkerStatus{WorkerID: "w1", Pool: schema.PoolShort, Slots: 1000, At: now}, now.Add(time.Hour))
			if _, err := s.Apply(ctx, now, &w); err != nil {
				b.Fatal(err)
			}
			before := scriptStats(b, rdb)
			jobs := 0
			for i := 0; b.Loop(); i++ {
				lifecycle(b, s, now, i, size)
				jobs += size
			}
			after := scriptStats(b, rdb)
			per := func(k string) float64 { return (after[k] - before[k]) / float64(jobs) }
			b.ReportMetric(per("script_usec"), "redis-µs/job")
			b.ReportMetric(per("script_calls"), "scripts/job")
			b.ReportMetric(per("nested_calls"), "commands/job")
		})
	}
}

// lifecycle enqueues size jobs, dispatches them in one step and reports
// each started and completed, as the scheduler's consumer would.
func lifecycle(b *testing.B, s *Store, now time.Time, round, size int) {
	ctx := context.Background()
	var enqueue Batch
	for j := range size {
		e := schema.Enqueued{
			JobRef:    schema.JobRef{JobID: fmt.Sprintf("j%d-%d", round, j), TenantID: "t1", Attempt: 1},
			Job:       schema.JobSpec{Type: "noop", Queue: "default", Priority: 5, MaxAttempts: 3, Pool: schema.PoolShort},
			CreatedAt: now, Reason: schema.ReasonSubmitted,
		}
		if err := enqueue.Enqueue(e, now); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := s.Apply(ctx, now, &enqueue); err != nil {
		b.Fatal(err)
	}
	res, err := s.Dispatch(ctx, DispatchParams{Pool: schema.PoolShort, Now: now, MaxBatch: 512, DispatchIDPrefix: fmt.Sprintf("d%d", round)})
	if err != nil || len(res.Dispatched) != size {
		b.Fatalf("dispatched %d of %d: %v", len(res.Dispatched), size, err)
	}
	var done Batch
	for _, d := range res.Dispatched {
		done.Extend(d.JobID, d.DispatchID)
		done.Usage(d.JobID, d.DispatchID, now, now.Add(5*time.Millisecond))
		done.Complete(d.JobID, d.TenantID, d.DispatchID)
	}
	if _, err := s.Apply(ctx, now, &done); err != nil {
		b.Fatal(err)
	}
}

// scriptStats reads INFO commandstats: the calls and usec of scripts and
// functions (EVALSHA, FCALL), and the calls of every other command but
// INFO (those the scripts ran, and the few the Go side sends directly).
func scriptStats(b testing.TB, rdb *redis.Client) map[string]float64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		var calls, usec float64
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				calls, _ = strconv.ParseFloat(v, 64)
			}
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		if name == "cmdstat_evalsha" || name == "cmdstat_fcall" {
			out["script_calls"] += calls
			out["script_usec"] += usec
		} else {
			out["nested_calls"] += calls
		}
	}
	return out
}

// BenchmarkScriptFixedCost is what a script call costs Redis before it
// does any work: an empty script, the shared helpers (prelude) alone, an
// apply call with no operation and a dispatch step with nothing to do,
// each as the function the scheduler calls and as the EVALSHA script it
// was until session 21. EVALSHA runs a script's whole chunk on every
// call, so every local function of the helpers is defined again each
// time; a function library defines them once, at load (library.go).
func BenchmarkScriptFixedCost(b *testing.B) {
	rdb, s := openStore(b, Options{Lease: 10 * time.Second, Prefix: fmt.Sprintf("fixed%d:", time.Now().UnixNano())})
	now := time.Now()
	applyArgs := s.applyHead(now, true)
	dispatchArgs := s.dispatchArgs(DispatchParams{Pool: schema.PoolShort, Now: now, MaxBatch: 512, DispatchIDPrefix: "x"}, true)
	cases := []struct {
		name string
		call scriptCall
	}{
		{"empty", evalCall(redis.NewScript("return 1"), nil)},
		{"prelude", evalCall(redis.NewScript(prelude+"\nreturn 1"), nil)},
		{"apply-no-op", fcall(applyScript, applyArgs)},
		{"apply-no-op-evalsha", evalCall(redis.NewScript(applyScript.evalSource()), applyArgs)},
		{"dispatch-idle", fcall(dispatchScript, dispatchArgs)},
		{"dispatch-idle-evalsha", evalCall(redis.NewScript(dispatchScript.evalSource()), dispatchArgs)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) { runScript(b, rdb, c.call) })
	}
}

// scriptCall runs one script or function call.
type scriptCall func(ctx context.Context, rdb *redis.Client) error

func evalCall(script *redis.Script, args []any) scriptCall {
	return func(ctx context.Context, rdb *redis.Client) error { return script.Run(ctx, rdb, nil, args...).Err() }
}

func fcall(j jobScript, args []any) scriptCall {
	return func(ctx context.Context, rdb *redis.Client) error { return j.call(ctx, rdb, args...).Err() }
}

// runScript runs call for the benchmark's iterations and reports what
// Redis spent per call (INFO commandstats) and the commands each call ran.
func runScript(b *testing.B, rdb *redis.Client, call scriptCall) {
	ctx := context.Background()
	if err := call(ctx, rdb); err != nil { // loads the script or library
		b.Fatal(err)
	}
	before := scriptStats(b, rdb)
	calls := 0
	for b.Loop() {
		if err := call(ctx, rdb); err != nil {
			b.Fatal(err)
		}
		calls++
	}
	after := scriptStats(b, rdb)
	b.ReportMetric((after["script_usec"]-before["script_usec"])/float64(calls), "redis-µs/call")
	b.ReportMetric((after["nested_calls"]-before["nested_calls"])/float64(calls), "commands/call")
}

// BenchmarkDispatchStepByWorkers is what an idle dispatch step costs Redis
// with 1, 16 and 64 live workers in its pool, each announcing its routing
// (four job types, its share of 64 partitions). A step that built the
// pool's route table from every live worker's routing (one read and one
// JSON decode per worker) cost ~120 / ~170 / ~300 µs; with the table kept
// until the routing changes (route_table in route.lua) it stays about flat
// (docs/performance.md, Round 19; docs/scaling.md).
//
//	go test -run '^$' -bench DispatchStepByWorkers ./internal/qstore
func BenchmarkDispatchStepByWorkers(b *testing.B) {
	for _, workers := range []int{1, 16, 64} {
		b.Run("workers="+strconv.Itoa(workers), func(b *testing.B) {
			ctx := context.Background()
			rdb, s := openStore(b, Options{Lease: 10 * time.Second, Prefix: fmt.Sprintf("workers%d:%d:", workers, time.Now().UnixNano())})
			now := time.Now()
			var batch Batch
			for w := range workers {
				var parts []int32
				for p := w; p < 64; p += workers {
					parts = append(parts, int32(p))
				}
				batch.Worker(schema.WorkerStatus{WorkerID: fmt.Sprintf("w%d", w), Pool: schema.PoolShort, Slots: 10, At: now,
					Routing: &schema.WorkerRouting{Types: []string{"noop", "email", "report", "http"}, Partitions: parts}}, now.Add(time.Hour))
			}
			if _, err := s.Apply(ctx, now, &batch); err != nil {
				b.Fatal(err)
			}
			runScript(b, rdb, fcall(dispatchScript, s.dispatchArgs(DispatchParams{Pool: schema.PoolShort, Now: now, MaxBatch: 512, DispatchIDPrefix: "x"}, true)))
		})
	}
}
