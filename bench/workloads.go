package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Bench runs workloads against one target.
type Bench struct {
	t       *Target
	probe   *Probe
	client  *http.Client
	runID   string
	sizes   Sizes
	clients int
	timeout time.Duration
	profile string // directory for pprof profiles; "" for none
	trace   bool   // a runtime trace beside each workload's profiles
	log     io.Writer
	noise   string

	// throughput's enqueue window, for audit-export
	enqFrom, enqTo time.Time
	enqN           int
}

// Sizes are the workloads' job counts (docs/benchmark.md's, or scaled by -quick).
type Sizes struct {
	Throughput, LatencyRate, Delayed, Retry, SSE, Audit, Flow int
	LatencyFor                                                time.Duration
	Delay                                                     time.Duration
}

// FullSizes are docs/benchmark.md's.
var FullSizes = Sizes{Throughput: 100_000, LatencyRate: 1000, LatencyFor: 20 * time.Second, Delayed: 10_000,
	Delay: 5 * time.Second, Retry: 2000, SSE: 2000, Audit: 100_000, Flow: 20_000}

// Scaled divides every count (not rates or delays) by f.
func (s Sizes) Scaled(f int) Sizes {
	if f <= 1 {
		return s
	}
	s.Throughput /= f
	s.LatencyFor /= time.Duration(f)
	s.Delayed /= f
	s.Retry /= f
	s.SSE /= f
	s.Audit /= f
	s.Flow /= f
	return s
}

type jobReq map[string]any

type submitted struct {
	ID string `json:"id"`
}

func (b *Bench) tag(workload string) string { return "bench-" + workload + "-" + b.runID }

func (b *Bench) post(ctx context.Context, path string, body any) (int, []byte, error) {
	return b.send(ctx, http.MethodPost, path, b.t.Key, body)
}

// send calls the API with key, body (when not nil) as JSON, and returns
// the status and the answer.
func (b *Bench) send(ctx context.Context, method, path, key string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.t.API+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// submitBatch posts jobs to /v1/jobs/batch (retrying 5xx a few times) and
// returns the ids of the accepted jobs.
func (b *Bench) submitBatch(ctx context.Context, jobs []jobReq) ([]string, error) {
	var lastErr error
	for try := 0; try < 5; try++ {
		code, raw, err := b.post(ctx, "/v1/jobs/batch", map[string]any{"jobs": jobs})
		if err != nil {
			lastErr = err
		} else if code == http.StatusAccepted || code == http.StatusOK {
			var out struct {
				Jobs []struct {
					ID    string          `json:"id"`
					Error json.RawMessage `json:"error"`
				} `json:"jobs"`
			}
			if err := json.Unmarshal(raw, &out); err != nil {
				return nil, err
			}
			ids := make([]string, 0, len(out.Jobs))
			var rejected int
			for _, j := range out.Jobs {
				if j.ID != "" && j.Error == nil {
					ids = append(ids, j.ID)
				} else {
					rejected++
				}
			}
			if rejected > 0 {
				return ids, fmt.Errorf("%d items of a batch rejected", rejected)
			}
			return ids, nil
		} else {
			lastErr = fmt.Errorf("batch: HTTP %d: %s", code, truncate(raw, 300))
			if code < 500 {
				return nil, lastErr
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil, lastErr
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// outcome finishes a result from the projection and the log: lost (accepted
// but not succeeded), duplicated (completed more than once in the log).
type logCheck struct {
	to        Offsets // the end offsets the check read up to
	completed Attempts
	failed    Attempts
	started   Attempts
}

func (b *Bench) checkLog(ctx context.Context, from Offsets, withFailed bool) (logCheck, error) {
	// Late duplicates would come after the projection's last row: give
	// them a moment to appear.
	time.Sleep(time.Second)
	to, err := b.probe.endOffsets(ctx)
	if err != nil {
		return logCheck{}, err
	}
	lc := logCheck{to: to}
	p := b.probe.prefix
	if lc.completed, err = b.probe.readEvents(ctx, p+"jobs.completed", from, to); err != nil {
		return lc, err
	}
	if lc.started, err = b.probe.readEvents(ctx, p+"jobs.started", from, to); err != nil {
		return lc, err
	}
	if withFailed {
		if lc.failed, err = b.probe.readEvents(ctx, p+"jobs.failed", from, to); err != nil {
			return lc, err
		}
	}
	return lc, nil
}

// settle fills lost and duplicated of r from the accepted ids, the
// projection rows and the log.
// account checks the log from the offsets before the workload and settles
// lost and duplicated jobs into r, returning the notes of both and what the
// log held.
func (b *Bench) account(ctx context.Context, r *Result, from Offsets, withFailed bool, ids []string, rows map[string]JobRow) ([]string, logCheck) {
	lc, err := b.checkLog(ctx, from, withFailed)
	var notes []string
	if err != nil {
		notes = append(notes, "log check: "+err.Error())
	}
	return append(notes, settle(r, ids, rows, lc)...), lc
}

func settle(r *Result, ids []string, rows map[string]JobRow, lc logCheck) (notes []string) {
	var lost, dup, restarted int
	for _, id := range ids {
		row, ok := rows[id]
		if !ok || row.Status != "succeeded" {
			lost++
		}
		if len(lc.completed[id]) > 1 {
			dup++
		}
		if ok && row.Status == "succeeded" && len(lc.completed[id]) == 0 {
			notes = append(notes, "projection shows success without a completed event for "+id)
		}
		seen := map[int]bool{}
		for _, a := range lc.started[id] {
			if seen[a] {
				restarted++
				break
			}
			seen[a] = true
		}
	}
	r.Lost, r.Duplicated = lost, dup
	if restarted > 0 {
		notes = append(notes, fmt.Sprintf("%d jobs had an attempt started more than once (log)", restarted))
	}
	if len(notes) > 5 {
		notes = append(notes[:5], fmt.Sprintf("… %d more notes", len(notes)-5))
	}
	return notes
}

// --- throughput -------------------------------------------------------

func (b *Bench) throughput(ctx context.Context) Result {
	n := b.sizes.Throughput
	r := Result{System: "ferry", Workload: "throughput", N: n}
	tag := b.tag("throughput")
	before := b.probe.counters(ctx)
	rss := SampleRSS(b.t.PID, 100*time.Millisecond)

	stopProfile := b.startProfile(ctx, "throughput", 30*time.Second)
	sub := b.submitConcurrently(ctx, n, tag)
	enqDur := sub.lastOK.Sub(sub.t0)
	b.enqFrom, b.enqTo, b.enqN = sub.t0.Add(-time.Second), sub.lastOK.Add(time.Second), len(sub.ids)
	r.EnqueueRate = Rate(len(sub.ids), enqDur)
	fmt.Fprintf(b.log, "throughput: %d accepted in %s (%.0f/s), waiting for completion\n", len(sub.ids), enqDur.Round(time.Millisecond), r.EnqueueRate)

	_, ok := b.probe.waitDone(ctx, tag, len(sub.ids), b.timeout)
	stopProfile()
	r.RSSMB = rss.Stop()
	// Every projection's work is part of what a job costs: when the status
	// projection shows all done, the audit log may still be catching up.
	caughtUp, lag, lagErr := b.probe.settle(ctx, time.Minute)
	after := b.probe.pgFlushed(ctx, b.probe.counters(ctx), 15*time.Second)
	// Read after the counters: reading every row back is the bench's work.
	rows, err := b.probe.jobs(ctx, tag)
	notes := []string{caughtUpNote(caughtUp, lag, lagErr)}
	if err != nil {
		notes = append(notes, "projection read: "+err.Error())
	}
	if !ok {
		notes = append(notes, fmt.Sprintf("timed out after %s waiting for completion", b.timeout))
	}
	for _, e := range sub.errs[:min(len(sub.errs), 3)] {
		notes = append(notes, "submit: "+e.Error())
	}
	notes = append(notes, completionFigures(&r, rows, sub.t0, n)...)
	notes = append(notes, "p*_ms: submission → completion per job", fmt.Sprintf("%d concurrent clients, batches of 1000", b.clients))
	if pid := brokerPID(b.t.PID); pid > 0 {
		notes = append(notes, fmt.Sprintf("broker rss %.0f MiB at the end (its own process: not in rss_mb)", RSSMB(pid)))
	}
	accounted, _ := b.account(ctx, &r, before.Kafka, false, padIDs(sub.ids, n), rows)
	notes = append(notes, accounted...)
	s, detail := b.probe.perJob(before, after, len(sub.ids))
	notes = append(notes, s)
	r.addRecord("counters", detail)
	r.Notes = strings.Join(append(notes, b.noise), "; ")
	return r
}

// caughtUpNote says how long after the last completion the per-job
// counters were read: once every projection had applied every record.
func caughtUpNote(waited time.Duration, lag int64, err error) string {
	if err != nil {
		return "per-job counters read without waiting for the projections: " + err.Error()
	}
	return fmt.Sprintf("per-job counters read %.1f s after the last completion, when every projection had caught up (lag %d records)", waited.Seconds(), lag)
}

// submissions is what a submission phase left: accepted ids, errors, when it
// started and when the last accepted call returned.
type submissions struct {
	ids        []string
	errs       []error
	t0, lastOK time.Time
}

// submitConcurrently submits n noop jobs tagged tag in batches of 1,000
// from b.clients concurrent clients.
func (b *Bench) submitConcurrently(ctx context.Context, n int, tag string) submissions {
	return b.submitJobs(ctx, n, func(int) jobReq { return jobReq{"type": "noop", "tags": []string{tag}} })
}

// submitJobs submits the n jobs job(0) … job(n-1) in batches of 1,000 from
// b.clients concurrent clients.
func (b *Bench) submitJobs(ctx context.Context, n int, job func(i int) jobReq) submissions {
	const batch = 1000
	batches := make(chan int, n/batch+1) // each batch's first job
	for first := 0; first < n; first += batch {
		batches <- first
	}
	close(batches)
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = submissions{ids: make([]string, 0, n), t0: time.Now()}
	)
	for c := 0; c < b.clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first := range batches {
				jobs := make([]jobReq, min(batch, n-first))
				for i := range jobs {
					jobs[i] = job(first + i)
				}
				got, err := b.submitBatch(ctx, jobs)
				now := time.Now()
				mu.Lock()
				out.ids = append(out.ids, got...)
				if err != nil {
					out.errs = append(out.errs, err)
				}
				if now.After(out.lastOK) {
					out.lastOK = now
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// completionFigures sets r's end-to-end rate (n jobs from t0 to the last
// completion) and submission → completion percentiles from rows.
func completionFigures(r *Result, rows map[string]JobRow, t0 time.Time, n int) []string {
	var last time.Time
	var lat []float64
	for _, row := range rows {
		if row.FinishedAt == nil {
			continue
		}
		if row.FinishedAt.After(last) {
			last = *row.FinishedAt
		}
		lat = append(lat, Ms(row.FinishedAt.Sub(row.CreatedAt)))
	}
	r.setPercentiles(Summarize(lat))
	if last.IsZero() {
		return nil
	}
	r.E2EJobsPerS = Rate(n, last.Sub(t0))
	return []string{fmt.Sprintf("first enqueue → last completion %.2f s", last.Sub(t0).Seconds())}
}

// padIDs counts submissions that were never accepted as lost.
func padIDs(ids []string, n int) []string {
	for i := len(ids); i < n; i++ {
		ids = append(ids, fmt.Sprintf("never-accepted-%d", i))
	}
	return ids
}

// --- latency ----------------------------------------------------------

func (b *Bench) latency(ctx context.Context) Result {
	rate, dur := b.sizes.LatencyRate, b.sizes.LatencyFor
	n := int(float64(rate) * dur.Seconds())
	r := Result{System: "ferry", Workload: "latency", N: n}
	tag := b.tag("latency")
	before := b.probe.counters(ctx)
	rss := SampleRSS(b.t.PID, 100*time.Millisecond)

	// A profile of the offered load's first half: what a job costs at a
	// moderate rate, where batches are small (the throughput profile
	// shows full load).
	stopProfile := b.startProfile(ctx, "latency", dur/2)
	o := b.offer(ctx, n, rate, tag)
	stopProfile()
	offered := Rate(n, o.sentAll.Sub(o.t0))
	r.EnqueueRate = Rate(len(o.ids), time.Since(o.t0))

	_, ok := b.probe.waitDone(ctx, tag, len(o.ids), b.timeout)
	r.RSSMB = rss.Stop()
	after := b.probe.counters(ctx)
	// Read after the counters: reading every row back is the bench's work.
	rows, err := b.probe.jobs(ctx, tag)
	var notes []string
	if err != nil {
		notes = append(notes, "projection read: "+err.Error())
	}
	if !ok {
		notes = append(notes, "timed out waiting for completion")
	}
	p, lastStart := startFigures(&r, rows, o.t0, len(o.ids))
	rt := Summarize(o.rtts)
	keptUp := offered >= 0.98*float64(rate) && o.failures == 0 && p.P99 < 1000
	notes = append(notes,
		fmt.Sprintf("kept up: %v (offered %.0f jobs/s against %d target, pacer max %.0f ms behind schedule, %d submissions failed; last start %.0f ms after the last submission)",
			keptUp, offered, rate, Ms(o.maxBehind), o.failures, Ms(lastStart.Sub(o.sentAll))),
		"p*_ms: created_at (request received) → started_at, from the status projection",
		fmt.Sprintf("client POST round trip p50 %.1f p99 %.1f max %.1f ms", rt.P50, rt.P99, rt.Max))
	if o.firstErr != nil {
		notes = append(notes, "first submit error: "+o.firstErr.Error())
	}
	accounted, lc := b.account(ctx, &r, before.Kafka, false, padIDs(o.ids, n), rows)
	notes = append(notes, accounted...)
	notes = append(notes, b.latencyStageNotes(ctx, &r, before.Kafka, lc.to, o)...)
	// What a job costs at this rate (CPU from /proc: robust to other load,
	// unlike the times): produce requests and script calls batch less at
	// 1k/s than in the throughput workload.
	s, detail := b.probe.perJob(before, after, len(o.ids))
	notes = append(notes, s)
	r.addRecord("counters", detail)
	r.Notes = strings.Join(append(notes, b.noise), "; ")
	return r
}

// latencyStageNotes are the latency workload's per-hop times (latencyStages)
// from its records on the log: which hop of submit → start the time goes
// to. The detail goes to the results file as "stages".
func (b *Bench) latencyStageNotes(ctx context.Context, r *Result, from, to Offsets, o offered) []string {
	sr, err := b.probe.readStages(ctx, latencyStages, from, to, o.ids)
	if err != nil {
		return []string{"stages: " + err.Error()}
	}
	sr.times["answered"] = o.answered
	s, detail := stageSummary(latencyStages, latencyGaps, sr.times, o.t0)
	r.addRecord("stages", detail)
	return []string{s}
}

// offered is what an open-loop submission phase left.
type offered struct {
	ids         []string
	rtts        []float64            // client round trip per accepted call, ms
	answered    map[string]time.Time // when each accepted call's answer arrived
	failures    int
	firstErr    error
	maxBehind   time.Duration // how far the pacer fell behind its schedule
	t0, sentAll time.Time
}

// offer submits n noop jobs, one POST /v1/jobs each, at rate per second on
// a fixed schedule (open loop: a slow call does not delay the next).
func (b *Bench) offer(ctx context.Context, n, rate int, tag string) offered {
	interval := time.Second / time.Duration(rate)
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = offered{ids: make([]string, 0, n), rtts: make([]float64, 0, n), answered: make(map[string]time.Time, n)}
	)
	sem := make(chan struct{}, 512)
	body, _ := json.Marshal(jobReq{"type": "noop", "tags": []string{tag}})
	out.t0 = time.Now()
	for i := 0; i < n; i++ {
		due := out.t0.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		if behind := time.Since(due); behind > out.maxBehind {
			out.maxBehind = behind
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			start := time.Now()
			id, err := b.submitOne(ctx, body)
			now := time.Now()
			rtt := Ms(now.Sub(start))
			mu.Lock()
			defer mu.Unlock()
			if id == "" {
				out.failures++
				if out.firstErr == nil {
					out.firstErr = err
				}
				return
			}
			out.ids = append(out.ids, id)
			out.rtts = append(out.rtts, rtt)
			out.answered[id] = now
		}()
	}
	out.sentAll = time.Now()
	wg.Wait()
	return out
}

// submitOne posts one job; the id of the accepted job, or "" and why not.
func (b *Bench) submitOne(ctx context.Context, body []byte) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b.t.API+"/v1/jobs", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+b.t.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return "", err
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("HTTP %d: %s", resp.StatusCode, truncate(raw, 200))
	}
	var s submitted
	_ = json.Unmarshal(raw, &s)
	if s.ID == "" {
		return "", fmt.Errorf("HTTP 202 without a job id: %s", truncate(raw, 200))
	}
	return s.ID, nil
}

// startFigures sets r's submission → start percentiles and end-to-end rate
// (accepted jobs from t0 to the last completion); it returns the
// percentiles and the last start.
func startFigures(r *Result, rows map[string]JobRow, t0 time.Time, accepted int) (Percentiles, time.Time) {
	var lat []float64
	var lastStart, lastDone time.Time
	for _, row := range rows {
		if row.StartedAt != nil {
			lat = append(lat, Ms(row.StartedAt.Sub(row.CreatedAt)))
			if row.StartedAt.After(lastStart) {
				lastStart = *row.StartedAt
			}
		}
		if row.FinishedAt != nil && row.FinishedAt.After(lastDone) {
			lastDone = *row.FinishedAt
		}
	}
	p := Summarize(lat)
	r.setPercentiles(p)
	if !lastDone.IsZero() {
		r.E2EJobsPerS = Rate(accepted, lastDone.Sub(t0))
	}
	return p, lastStart
}

// batchRun is what submitting a workload in batches and waiting for it left.
type batchRun struct {
	before    Counters
	t0        time.Time // first submission
	submitted time.Time // the last batch's answer
	seenDone  time.Time // when the bench saw every job finished in the status projection
	ids, errs []string  // accepted job ids; batch errors
	rows      map[string]JobRow
	notes     []string
}

// submitAndWait submits n jobs tagged tag in batches of 1,000 (fill sets
// each batch's jobs), sets r's enqueue rate and resident memory, and waits
// up to timeout for the jobs to finish in the status projection.
func (b *Bench) submitAndWait(ctx context.Context, r *Result, tag string, n int, timeout time.Duration, fill func([]jobReq)) batchRun {
	run := batchRun{before: b.probe.counters(ctx)}
	rss := SampleRSS(b.t.PID, 100*time.Millisecond)
	run.t0 = time.Now()
	for left := n; left > 0; left -= 1000 {
		jobs := make([]jobReq, min(1000, left))
		fill(jobs)
		got, err := b.submitBatch(ctx, jobs)
		run.ids = append(run.ids, got...)
		if err != nil {
			run.errs = append(run.errs, err.Error())
		}
	}
	run.submitted = time.Now()
	r.EnqueueRate = Rate(len(run.ids), run.submitted.Sub(run.t0))
	_, ok := b.probe.waitDone(ctx, tag, len(run.ids), timeout)
	run.seenDone = time.Now()
	var err error
	run.rows, err = b.probe.jobs(ctx, tag)
	r.RSSMB = rss.Stop()
	if err != nil {
		run.notes = append(run.notes, "projection read: "+err.Error())
	}
	if !ok {
		run.notes = append(run.notes, "timed out waiting for completion")
	}
	return run
}

// --- delayed ----------------------------------------------------------

// onTimeWithin is the lateness the delayed workload counts as on time: a
// count robust to a loaded machine, unlike the percentiles of a burst that
// drains at the machine's throughput.
const onTimeWithin = 10 * time.Millisecond

func (b *Bench) delayed(ctx context.Context) Result {
	n := b.sizes.Delayed
	r := Result{System: "ferry", Workload: "delayed", N: n}
	tag := b.tag("delayed")
	// The profile covers the due waves (one per batch of 1,000, at its
	// submission time plus the delay), not the submission.
	waves := time.AfterFunc(b.sizes.Delay-100*time.Millisecond, func() { b.startProfile(ctx, "delayed", 2*time.Second)() })
	defer waves.Stop()
	run := b.submitAndWait(ctx, &r, tag, n, b.timeout+b.sizes.Delay, func(jobs []jobReq) {
		runAt := time.Now().Add(b.sizes.Delay).UTC().Format(time.RFC3339Nano)
		for i := range jobs {
			jobs[i] = jobReq{"type": "noop", "tags": []string{tag}, "run_at": runAt}
		}
	})
	ids, errs, t0, rows, notes := run.ids, run.errs, run.t0, run.rows, run.notes
	before := run.before
	var late []float64
	early, onTime := 0, 0
	var worstEarly time.Duration
	var lastDone time.Time
	for _, row := range rows {
		if row.StartedAt == nil || row.ScheduledFor == nil {
			continue
		}
		d := row.StartedAt.Sub(*row.ScheduledFor)
		if d < 0 {
			early++
			worstEarly = min(worstEarly, d)
		}
		late = append(late, Ms(d))
		if d >= 0 && d <= onTimeWithin {
			onTime++
		}
		if row.FinishedAt != nil && row.FinishedAt.After(lastDone) {
			lastDone = *row.FinishedAt
		}
	}
	p := Summarize(late)
	r.setPercentiles(p)
	if !lastDone.IsZero() {
		r.E2EJobsPerS = Rate(len(ids), lastDone.Sub(t0))
	}
	notes = append(notes, fmt.Sprintf("p*_ms: lateness = started_at − run_at (status projection); run_at = now + %s, one per batch of 1,000 (submitted over %.2f s); %d started early; %d started within %s of run_at",
		b.sizes.Delay, run.submitted.Sub(t0).Seconds(), early, onTime, onTimeWithin))
	if early > 0 {
		notes = append(notes, fmt.Sprintf("earliest start %.1f ms before run_at", -Ms(worstEarly)))
	}
	notes = append(notes, errs[:min(3, len(errs))]...)
	accounted, _ := b.account(ctx, &r, before.Kafka, false, padIDs(ids, n), rows)
	notes = append(notes, accounted...)
	r.Notes = strings.Join(append(notes, b.noise), "; ")
	return r
}

// --- retry ------------------------------------------------------------

func (b *Bench) retry(ctx context.Context) Result {
	n := b.sizes.Retry
	r := Result{System: "ferry", Workload: "retry", N: n}
	tag := b.tag("retry")
	// The workload lasts a few seconds: the profile covers its first pass,
	// the backoff and most of its second pass.
	stopProfile := b.startProfile(ctx, "retry", 4*time.Second)
	run := b.submitAndWait(ctx, &r, tag, n, b.timeout, func(jobs []jobReq) {
		for i := range jobs {
			jobs[i] = jobReq{"type": "fail", "tags": []string{tag}, "payload": map[string]any{"times": 1},
				"backoff": map[string]any{"base": "1s", "max": "1s", "jitter": 0}}
		}
	})
	stopProfile()
	// The per-job counters end once every projection caught up, before the
	// bench reads the log back (account, the stages): those reads are the
	// bench's, and the broker's CPU would count them as the workload's.
	caughtUp, lag, lagErr := b.probe.settle(ctx, time.Minute)
	after := b.probe.counters(ctx)
	ids, errs, t0, rows, notes := run.ids, run.errs, run.t0, run.rows, run.notes
	notes = append(notes, caughtUpNote(caughtUp, lag, lagErr))
	before := run.before
	var per []float64
	var lastDone time.Time
	for _, row := range rows {
		if row.FinishedAt != nil {
			per = append(per, Ms(row.FinishedAt.Sub(row.CreatedAt)))
			if row.FinishedAt.After(lastDone) {
				lastDone = *row.FinishedAt
			}
		}
	}
	r.setPercentiles(Summarize(per))
	if !lastDone.IsZero() {
		r.E2EJobsPerS = Rate(len(ids), lastDone.Sub(t0))
		notes = append(notes, fmt.Sprintf("time to all complete %.2f s (first submission → last completion)", lastDone.Sub(t0).Seconds()))
	}
	notes = append(notes, "p*_ms: submission → completion per job",
		"fail handler {times:1}, backoff base=max=1s, jitter 0: a constant 1 s retry delay, as Asynq tuned was measured")
	notes = append(notes, errs[:min(3, len(errs))]...)
	accounted, lc := b.account(ctx, &r, before.Kafka, true, padIDs(ids, n), rows)
	notes = append(notes, accounted...)
	// Exactly two attempts each: one failure of attempt 1, one completion of attempt 2.
	var wrong int
	for _, id := range ids {
		f, c := lc.failed[id], lc.completed[id]
		if len(f) != 1 || f[0] != 1 || len(c) != 1 || c[0] != 2 || rows[id].Attempt != 2 {
			wrong++
		}
	}
	notes = append(notes, fmt.Sprintf("%d jobs without exactly two attempts (failed #1, completed #2)", wrong))
	// Per retried job (two attempts: a failure, a retry decision, a
	// completion), the counters the per-job budget reads for a plain one.
	perJob, counters := b.probe.perJob(before, after, len(ids))
	r.addRecord("counters", counters)
	notes = append(notes, "from its first submission until every projection caught up, "+perJob)
	notes = append(notes, b.retryStageNotes(ctx, &r, run, lc.to)...)
	r.Notes = strings.Join(append(notes, b.noise), "; ")
	return r
}

// retryStageNotes are the retry workload's per-stage times (retryStages)
// from its records on the log, with the submission and the bench's own
// wait; the detail goes to the results file as "stages".
func (b *Bench) retryStageNotes(ctx context.Context, r *Result, run batchRun, to Offsets) []string {
	sr, err := b.probe.readStages(ctx, retryStages, run.before.Kafka, to, run.ids)
	if err != nil {
		return []string{"stages: " + err.Error()}
	}
	s, detail := stageSummary(retryStages, retryGaps, sr.times, run.t0)
	detail["submitted_s"] = round(run.submitted.Sub(run.t0).Seconds(), 3)
	detail["projection_seen_done_s"] = round(run.seenDone.Sub(run.t0).Seconds(), 3)
	detail["attempt2_leased_ahead"] = sr.leasedFor
	r.addRecord("stages", detail)
	return []string{fmt.Sprintf("submission answered at %.2f s; the bench saw all done in the projection at %.2f s",
		run.submitted.Sub(run.t0).Seconds(), run.seenDone.Sub(run.t0).Seconds()),
		s,
		fmt.Sprintf("%d of %d attempt-2 dispatches leased ahead of their due time (not_before)", sr.leasedFor, len(run.ids)),
	}
}

// --- sse-idle ---------------------------------------------------------

func (b *Bench) sseIdle(ctx context.Context) Result {
	n := b.sizes.SSE
	r := Result{System: "ferry", Workload: "sse-idle", N: n}
	runtimeSettle := 3 * time.Second
	time.Sleep(runtimeSettle)
	base := RSSMB(b.t.PID)
	inuse0 := b.goInuse(ctx)
	tr := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: n, DisableCompression: true}
	cl := &http.Client{Transport: tr}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var open, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			req, _ := http.NewRequestWithContext(sctx, http.MethodGet, b.t.API+"/v1/events", nil)
			req.Header.Set("Authorization", "Bearer "+b.t.Key)
			req.Header.Set("Accept", "text/event-stream")
			resp, err := cl.Do(req)
			<-sem
			if err == nil && resp.StatusCode != http.StatusOK {
				raw, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
				resp.Body.Close()
				err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, raw)
			}
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				wg.Done()
				return
			}
			open.Add(1)
			wg.Done()
			_, _ = io.Copy(io.Discard, resp.Body) // idle: only keep-alive comments
			resp.Body.Close()
		}()
	}
	wg.Wait()
	opened := time.Since(t0)
	if failed.Load() > 0 {
		// The memory of fewer streams than specified is not the figure
		// this workload reports.
		r.failure = fmt.Sprintf("%d of %d SSE streams failed to open on GET /v1/events (first error: %v); no figure reported",
			failed.Load(), n, firstErr.Load())
		r.Notes = "failed: " + r.failure
		return r
	}
	// Hold the idle streams and sample the server's resident memory.
	rss := SampleRSS(b.t.PID, 200*time.Millisecond)
	time.Sleep(10 * time.Second)
	r.RSSMB = rss.Stop()
	now := RSSMB(b.t.PID)
	inuse1 := b.goInuse(ctx)
	cancel()
	r.Lost = 0
	notes := []string{
		fmt.Sprintf("%d streams open in %.1f s on GET /v1/events; rss_mb = peak VmRSS of the ferry dev process (api, scheduler, workers, projections, sse-bridge, audit, webhooks; the broker is its own process) over 10 s idle",
			open.Load(), opened.Seconds()),
		fmt.Sprintf("VmRSS before opening %.1f MiB, after %.1f MiB: %.1f KiB per stream", base, now, (now-base)*1024/float64(open.Load())),
	}
	if inuse0 > 0 && inuse1 > 0 {
		notes = append(notes, fmt.Sprintf("Go heap+stack in use %.1f → %.1f MiB: %.1f KiB per stream (runtime.MemStats via pprof)",
			inuse0/(1<<20), inuse1/(1<<20), (inuse1-inuse0)/1024/float64(open.Load())))
	}
	r.Notes = strings.Join(append(notes, b.noise), "; ")
	return r
}

// --- audit-export -----------------------------------------------------

func (b *Bench) auditExport(ctx context.Context) Result {
	n := b.sizes.Audit
	r := Result{System: "ferry", Workload: "audit-export", N: n}
	var notes []string
	if b.enqN < n {
		notes = append(notes, b.seedAudit(ctx, n)...)
	}
	have, err := b.waitAuditRows(ctx)
	if err != nil {
		r.skipped = true
		r.Notes = "skipped: cannot count audit rows: " + err.Error()
		return r
	}
	q := url.Values{"format": {"ndjson"}, "type": {"enqueued"},
		"from": {b.enqFrom.UTC().Format(time.RFC3339Nano)}, "to": {b.enqTo.UTC().Format(time.RFC3339Nano)}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.t.API+"/v1/audit/export?"+q.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+b.t.Key)
	time.Sleep(2 * time.Second)
	base := RSSMB(b.t.PID)
	rss := SampleRSS(b.t.PID, 20*time.Millisecond)
	t0 := time.Now()
	x, err := b.export(req)
	r.RSSMB = rss.Stop()
	if err != nil {
		r.skipped = true
		r.Notes = "skipped: " + err.Error()
		return r
	}
	d := time.Since(t0)
	r.E2EJobsPerS = Rate(x.rows, d)
	r.MaxMs = round(Ms(d), 1)
	if x.readErr != nil {
		notes = append(notes, "read: "+x.readErr.Error())
	}
	if x.rows != n {
		notes = append(notes, fmt.Sprintf("exported %d rows, expected %d (audit projection held %d)", x.rows, n, have))
	}
	notes = append(notes, fmt.Sprintf("rows/s in e2e_jobs_per_s: %d rows, %.1f MB NDJSON in %.2f s (first row after %.0f ms); max_ms = whole export; rss_mb = peak VmRSS during the export, %.1f MiB before",
		x.rows, float64(x.bytes)/1e6, d.Seconds(), Ms(x.firstRow.Sub(t0)), base))
	r.Notes = strings.Join(append(notes, b.noise), "; ")
	return r
}

// seedAudit submits n jobs when no throughput run left rows to export.
func (b *Bench) seedAudit(ctx context.Context, n int) []string {
	var notes []string
	tag := b.tag("audit")
	from := time.Now().Add(-time.Second)
	var ids []string
	for left := n; left > 0; left -= 1000 {
		jobs := make([]jobReq, min(1000, left))
		for i := range jobs {
			jobs[i] = jobReq{"type": "noop", "tags": []string{tag}}
		}
		got, err := b.submitBatch(ctx, jobs)
		if err != nil {
			notes = append(notes, "seed: "+err.Error())
		}
		ids = append(ids, got...)
	}
	b.enqFrom, b.enqTo, b.enqN = from, time.Now().Add(time.Second), len(ids)
	return notes
}

// waitAuditRows waits (up to the workload timeout) for the audit projection
// to hold every enqueued row of the export window; it returns how many it holds.
func (b *Bench) waitAuditRows(ctx context.Context) (int, error) {
	deadline := time.Now().Add(b.timeout)
	for {
		have, err := b.probe.auditRows(ctx, "enqueued", b.enqFrom, b.enqTo)
		if err != nil || have >= b.enqN || time.Now().After(deadline) {
			return have, err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// exported is what reading an NDJSON export counted.
type exported struct {
	rows, bytes int
	firstRow    time.Time
	readErr     error // the body broke off
}

// export runs req and counts the rows of its NDJSON body as they stream.
func (b *Bench) export(req *http.Request) (exported, error) {
	resp, err := b.client.Do(req)
	if err != nil {
		return exported{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return exported{}, fmt.Errorf("GET /v1/audit/export: HTTP %d: %s", resp.StatusCode, raw)
	}
	var x exported
	br := bufio.NewReaderSize(resp.Body, 1<<20)
	for {
		line, err := br.ReadSlice('\n')
		x.bytes += len(line)
		if len(line) > 0 && line[len(line)-1] == '\n' {
			if x.rows == 0 {
				x.firstRow = time.Now()
			}
			x.rows++
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			x.readErr = err
		}
		if err != nil {
			return x, nil
		}
	}
}

// goInuse is HeapInuse + StackInuse of the serving process in bytes, from
// the runtime.MemStats that /debug/pprof/heap?debug=1 prints (0 if unknown).
func (b *Bench) goInuse(ctx context.Context) float64 {
	if b.t.Pprof == "" {
		return 0
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.t.Pprof+"/debug/pprof/heap?debug=1&gc=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var total float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, k := range []string{"# HeapInuse = ", "# StackInuse = "} {
			if v, ok := strings.CutPrefix(sc.Text(), k); ok {
				var n float64
				fmt.Sscan(v, &n)
				total += n
			}
		}
	}
	return total
}
