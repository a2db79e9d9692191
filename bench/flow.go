package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// --- flow -------------------------------------------------------------
//
// What flow control costs a job (docs/flow-control.md): the same noop jobs
// as throughput, in three phases of Sizes.Flow jobs each on the default
// tenant:
//
//   - plain: the tenant has no flow control;
//   - other-type-limited: the tenant has a dispatch rate limit on another
//     type (sleep), so every dispatch step reads its rate limits, but no
//     plain job is gated;
//   - flow-controlled: every job carries a concurrency key (one of 100,
//     limit 10,000) and a unique key (while queued), and its type has a
//     rate limit; none of them ever binds (the limits are far above what
//     the stack does), so what the phase measures is their cost, not
//     their effect.
//
// Each phase reports e2e jobs/s and per-job counters (Redis commands above
// all). The result's e2e_jobs_per_s is the flow-controlled phase's.

// flowPhase is one phase: the tenant's flow_control during it (nil: none)
// and the job it submits for index i under tag.
type flowPhase struct {
	name        string
	flowControl map[string]any
	job         func(i int, tag string) jobReq
}

// flowKeys is how many concurrency keys the flow-controlled jobs spread over.
const flowKeys = 100

var flowPhases = []flowPhase{
	{name: "plain", job: plainNoop},
	{name: "other-type-limited", job: plainNoop,
		flowControl: map[string]any{"rate_limits": map[string]any{"sleep": map[string]any{"per_second": 1, "burst": 1}}}},
	{name: "flow-controlled",
		flowControl: map[string]any{"rate_limits": map[string]any{"noop": map[string]any{"per_second": 1_000_000, "burst": 1_000_000}}},
		job: func(i int, tag string) jobReq {
			j := plainNoop(i, tag)
			j["concurrency"] = map[string]any{"key": fmt.Sprintf("flow-%d", i%flowKeys), "limit": 10_000}
			j["unique"] = map[string]any{"key": fmt.Sprintf("%s-%d", tag, i), "while": "queued", "ttl": "10m"}
			return j
		}},
}

func plainNoop(_ int, tag string) jobReq { return jobReq{"type": "noop", "tags": []string{tag}} }

func (b *Bench) flowCost(ctx context.Context) Result {
	n := b.sizes.Flow
	r := Result{System: "ferry", Workload: "flow", N: n}
	if b.t.AdminKey == "" {
		r.skipped, r.Notes = true, "skipped: setting flow control needs the admin key (-admin-key with -url)"
		return r
	}
	defer func() {
		if err := b.setFlowControl(ctx, nil); err != nil {
			fmt.Fprintln(b.log, "flow: removing the flow control:", err)
		}
	}()
	phases := map[string]any{}
	var notes []string
	for i, p := range flowPhases {
		if i > 0 {
			if _, _, err := b.probe.settle(ctx, 3*time.Minute); err != nil {
				notes = append(notes, "settle: "+err.Error())
			}
		}
		pr, detail, err := b.flowPhase(ctx, p, n)
		if err != nil {
			r.skipped, r.Notes = true, fmt.Sprintf("skipped: phase %s: %v", p.name, err)
			return r
		}
		phases[p.name] = detail
		r.Lost, r.Duplicated = r.Lost+pr.Lost, r.Duplicated+pr.Duplicated
		r.E2EJobsPerS, r.EnqueueRate = pr.E2EJobsPerS, pr.EnqueueRate
		r.P50Ms, r.P95Ms, r.P99Ms, r.MaxMs = pr.P50Ms, pr.P95Ms, pr.P99Ms, pr.MaxMs
		notes = append(notes, fmt.Sprintf("%s: e2e %.0f jobs/s, redis commands %.2f per job, lost %d, duplicated %d (%s)",
			p.name, pr.E2EJobsPerS, detail["redis_per_job"], pr.Lost, pr.Duplicated, pr.Notes))
	}
	r.addRecord("phases", phases)
	r.Notes = strings.Join(append(notes, "e2e_jobs_per_s and p*_ms: the flow-controlled phase", b.noise), "; ")
	return r
}

// flowPhase sets p's flow control, waits until the scheduler applies it,
// and runs n of p's jobs to completion.
func (b *Bench) flowPhase(ctx context.Context, p flowPhase, n int) (Result, map[string]any, error) {
	if err := b.setFlowControl(ctx, p.flowControl); err != nil {
		return Result{}, nil, err
	}
	if err := b.waitRateLimits(ctx, p.flowControl); err != nil {
		return Result{}, nil, err
	}
	tag := b.tag("flow-" + p.name)
	fmt.Fprintf(b.log, "flow: phase %s, %d jobs\n", p.name, n)
	before := b.probe.counters(ctx)
	sub := b.submitJobs(ctx, n, func(i int) jobReq { return p.job(i, tag) })
	r := Result{EnqueueRate: Rate(len(sub.ids), sub.lastOK.Sub(sub.t0))}
	_, ok := b.probe.waitDone(ctx, tag, len(sub.ids), b.timeout)
	rows, err := b.probe.jobs(ctx, tag)
	after := b.probe.counters(ctx)
	var notes []string
	if err != nil || !ok || len(sub.errs) > 0 {
		notes = append(notes, fmt.Sprintf("incomplete: projection %v, done %v, %d submit errors", err, ok, len(sub.errs)))
	}
	notes = append(notes, completionFigures(&r, rows, sub.t0, n)...)
	accounted, _ := b.account(ctx, &r, before.Kafka, false, padIDs(sub.ids, n), rows)
	summary, detail := b.probe.perJob(before, after, len(sub.ids))
	r.Notes = strings.Join(append(notes, accounted...), "; ")
	if detail == nil {
		detail = map[string]any{}
	}
	var redis int64
	calls, _ := detail["redis_calls"].(map[string]int64)
	for _, c := range calls {
		redis += c
	}
	detail["redis_per_job"] = float64(redis) / float64(max(len(sub.ids), 1))
	detail["e2e_jobs_per_s"], detail["summary"] = r.E2EJobsPerS, summary
	return r, detail, nil
}

// setFlowControl replaces the default tenant's flow_control (nil removes it).
func (b *Bench) setFlowControl(ctx context.Context, fc map[string]any) error {
	code, raw, err := b.send(ctx, http.MethodPatch, "/v1/admin/tenants/"+b.t.Tenant, b.t.AdminKey, map[string]any{"flow_control": fc})
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("PATCH tenant: HTTP %d: %s", code, truncate(raw, 300))
	}
	return err
}

// waitRateLimits waits until the scheduler lists as many dispatch rate
// limits as fc sets (it re-reads tenant settings every 2 s).
func (b *Bench) waitRateLimits(ctx context.Context, fc map[string]any) error {
	want := 0
	if rl, ok := fc["rate_limits"].(map[string]any); ok {
		want = len(rl)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, raw, err := b.send(ctx, http.MethodGet, "/v1/rate-limits", b.t.Key, nil)
		var out struct {
			RateLimits []json.RawMessage `json:"rate_limits"`
		}
		if err == nil && code == http.StatusOK && json.Unmarshal(raw, &out) == nil && len(out.RateLimits) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the scheduler did not apply the flow control within 30 s (last: %d %s %v)", code, truncate(raw, 200), err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
