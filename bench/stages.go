package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A stage is one step of a job's life as its lifecycle records show it:
// which topic, which attempt, and which of the record's times marks it. The
// per-stage times tell which step a slow workload waits in (the api, the
// scheduler's decision, the due time, the dispatch, the worker), which the
// end-to-end figure alone cannot.
type stage struct {
	name    string
	topic   string // short topic name (without the prefix); "" for a stage the caller fills from its own clock
	attempt int
	at      func(r stageRecord) time.Time
}

// stageRecord is what a lifecycle record says about when things happened.
type stageRecord struct {
	Attempt    int        `json:"attempt"`
	CreatedAt  time.Time  `json:"created_at"`
	RunAt      time.Time  `json:"run_at"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt time.Time  `json:"finished_at"`
	NotBefore  *time.Time `json:"not_before"`
	produced   time.Time  // the record's timestamp: when its producer built it
}

// producedAt is the record's timestamp: when its producer built it (Ferry
// sets it with the record, before any wait to produce it).
func producedAt(r stageRecord) time.Time { return r.produced }
func createdAt(r stageRecord) time.Time  { return r.CreatedAt }
func runAt(r stageRecord) time.Time      { return r.RunAt }
func startedAt(r stageRecord) time.Time  { return r.StartedAt }
func finishedAt(r stageRecord) time.Time { return r.FinishedAt }

// retryStages are the retry workload's steps, in order: attempt 1 fails,
// the scheduler decides a retry (an enqueued record of attempt 2, due 1 s
// after the failure), attempt 2 is dispatched and completes.
var retryStages = []stage{
	{"enqueued#1", "jobs.enqueued", 1, producedAt},
	{"dispatched#1", "jobs.dispatch.short", 1, producedAt},
	{"started#1", "jobs.started", 1, startedAt},
	{"failed#1", "jobs.failed", 1, finishedAt},
	{"failure-produced#1", "jobs.failed", 1, producedAt},
	{"decided#2", "jobs.enqueued", 2, producedAt},
	{"due#2", "jobs.enqueued", 2, runAt},
	{"dispatched#2", "jobs.dispatch.short", 2, producedAt},
	{"started#2", "jobs.started", 2, startedAt},
	{"completed#2", "jobs.completed", 2, finishedAt},
}

// retryGaps are the per-job steps between two stages worth a percentile.
var retryGaps = [][2]string{
	{"enqueued#1", "dispatched#1"}, {"dispatched#1", "started#1"}, {"failed#1", "failure-produced#1"},
	{"failure-produced#1", "decided#2"}, {"decided#2", "due#2"}, {"due#2", "dispatched#2"},
	{"due#2", "started#2"}, {"dispatched#2", "started#2"}, {"started#2", "completed#2"},
}

// latencyStages are the latency workload's steps of a job: the api receives
// the request (created_at) and builds its enqueued record (the record's
// timestamp) after the request's Redis steps; the bench gets the 202 (its
// own clock, same machine: after the api's wait in the group commit and the
// produce round trip); the scheduler builds the dispatch (after its fetch of
// the enqueued record and its Lua step); the worker starts the handler
// (after the scheduler's produce round trip and its own fetch) and builds
// started. A record's timestamp is whole milliseconds, so a gap between two
// stages on the same process's clock is ±1 ms.
var latencyStages = []stage{
	{"received", "jobs.enqueued", 1, createdAt},
	{"enqueued", "jobs.enqueued", 1, producedAt},
	{"answered", "", 1, nil}, // the bench's own clock (latencyStageNotes)
	{"dispatched", "jobs.dispatch.short", 1, producedAt},
	{"started", "jobs.started", 1, startedAt},
}

// latencyGaps are the hops of latencyStages worth a percentile: the api's
// part (before the produce; the whole call), the scheduler's, the worker's,
// and submit → start.
var latencyGaps = [][2]string{
	{"received", "enqueued"}, {"received", "answered"}, {"enqueued", "dispatched"},
	{"answered", "dispatched"}, {"dispatched", "started"}, {"received", "started"},
}

// stageTimes are, per stage name, each job's time of that stage.
type stageTimes map[string]map[string]time.Time

// stageRun is what readStages found: the stage times, and how many
// dispatches of a later attempt were leased ahead of their due time (they
// carry not_before: the scheduler's lease-ahead, FERRY_SCHEDULER_LOOKAHEAD).
type stageRun struct {
	times     stageTimes
	leasedFor int
}

// readStages reads the topics of stages between the offsets from and to
// and returns each job's time of each stage, for the jobs in ids only.
func (p *Probe) readStages(ctx context.Context, stages []stage, from, to Offsets, ids []string) (stageRun, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	run := stageRun{times: stageTimes{}}
	byTopic := map[string][]stage{}
	for _, s := range stages {
		run.times[s.name] = map[string]time.Time{}
		if s.topic != "" { // a stage on no topic is the caller's to fill
			byTopic[s.topic] = append(byTopic[s.topic], s)
		}
	}
	for _, topic := range sortedKeys(byTopic) {
		err := p.scanTopic(ctx, p.prefix+topic, from, to, func(rec *kgo.Record) {
			id := string(rec.Key)
			if !want[id] {
				return
			}
			var r stageRecord
			if json.Unmarshal(rec.Value, &r) != nil {
				return
			}
			r.produced = rec.Timestamp
			if strings.HasPrefix(topic, "jobs.dispatch.") && r.Attempt > 1 && r.NotBefore != nil {
				run.leasedFor++
			}
			for _, s := range byTopic[topic] {
				if s.attempt != r.Attempt {
					continue
				}
				if _, seen := run.times[s.name][id]; !seen { // the first record of a stage counts
					run.times[s.name][id] = s.at(r)
				}
			}
		})
		if err != nil {
			return run, err
		}
	}
	return run, nil
}

// stageSummary formats, per stage, the first, median and last time after
// t0 (seconds), and, per gap, the jobs' p50, p95, p99 and max (ms).
func stageSummary(stages []stage, gaps [][2]string, times stageTimes, t0 time.Time) (string, map[string]any) {
	var parts []string
	detail := map[string]any{}
	for _, s := range stages {
		var secs []float64
		for _, at := range times[s.name] {
			if !at.IsZero() {
				secs = append(secs, at.Sub(t0).Seconds())
			}
		}
		if len(secs) == 0 {
			continue
		}
		sort.Float64s(secs)
		first, mid, last := secs[0], Percentile(secs, 50), secs[len(secs)-1]
		parts = append(parts, fmt.Sprintf("%s %.2f/%.2f/%.2f", s.name, first, mid, last))
		detail[s.name] = map[string]any{"n": len(secs), "first_s": round(first, 3), "p50_s": round(mid, 3), "last_s": round(last, 3)}
	}
	out := "stages, s after the first submission (first/p50/last): " + strings.Join(parts, ", ")
	var gparts []string
	for _, g := range gaps {
		var ms []float64
		for id, a := range times[g[0]] {
			if b, ok := times[g[1]][id]; ok && !a.IsZero() && !b.IsZero() {
				ms = append(ms, Ms(b.Sub(a)))
			}
		}
		if len(ms) == 0 {
			continue
		}
		p := Summarize(ms)
		name := g[0] + "→" + g[1]
		gparts = append(gparts, fmt.Sprintf("%s %.1f/%.1f/%.1f/%.0f", name, p.P50, p.P95, p.P99, p.Max))
		detail[name] = map[string]any{"n": p.N, "min_ms": p.Min, "p50_ms": p.P50, "p95_ms": p.P95, "p99_ms": p.P99, "max_ms": p.Max}
	}
	if len(gparts) > 0 {
		out += "; per-job gaps ms (p50/p95/p99/max): " + strings.Join(gparts, ", ")
	}
	return out, detail
}
