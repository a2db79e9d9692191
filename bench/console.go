package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The console workload (opt-in: -workloads console) measures the list
// calls the console's Jobs and Dead letters pages make, on a tenant with a
// million rows in each table: the first page, a page deep down the cursor,
// and the filtered pages. The rows are written straight into Postgres with
// COPY (the projections' tables, as the projections would hold them), so
// seeding takes seconds, not the hours a million jobs would take to run.
// Nothing is asserted: the answer times are reported.

// consoleRows is the rows of each table at full size (-scale divides it).
const consoleRows = 1_000_000

// consoleReps is how many times each call is timed (after one warm-up).
const consoleReps = 20

// consoleSpan is how far back the seeded rows' times reach.
const consoleSpan = 30 * 24 * time.Hour

// consoleCall is one list call of a console page.
type consoleCall struct {
	name, path string
}

func (b *Bench) console(ctx context.Context) Result {
	n := consoleRows / max(1, FullSizes.Throughput/max(1, b.sizes.Throughput))
	r := Result{System: "ferry", Workload: "console", N: n}
	prefix := "bench-console-" + b.runID + "-"
	now := time.Now().UTC()
	seedStart := time.Now()
	err := b.seedConsole(ctx, prefix, n, now)
	defer b.unseedConsole(prefix)
	if err != nil {
		r.skipped = true
		r.Notes = "skipped: seeding: " + err.Error()
		return r
	}
	seeded := time.Since(seedStart)
	calls, err := b.consoleCalls(ctx, now)
	if err != nil {
		r.skipped = true
		r.Notes = "skipped: " + err.Error()
		return r
	}
	var all []float64
	perCall := map[string]Percentiles{}
	var notes []string
	for _, c := range calls {
		ms, err := b.timeCall(ctx, c.path)
		if err != nil {
			r.skipped = true
			r.Notes = fmt.Sprintf("skipped: %s: %v", c.name, err)
			return r
		}
		all = append(all, ms...)
		p := Summarize(ms)
		perCall[c.name] = p
		notes = append(notes, fmt.Sprintf("%s p50 %.1f ms p95 %.1f ms", c.name, p.P50, p.P95))
	}
	r.setPercentiles(Summarize(all))
	r.addRecord("calls", perCall)
	r.Notes = fmt.Sprintf("%d jobs and %d dead-letter entries seeded with COPY in %.1f s; each call %d times (limit 50, as the pages ask); ",
		n, n, seeded.Seconds(), consoleReps) + strings.Join(append(notes, b.noise), "; ")
	return r
}

// seedConsole writes n jobs and n dead-letter entries of the bench's
// tenant, ids starting with prefix, created over the consoleSpan before now.
func (b *Bench) seedConsole(ctx context.Context, prefix string, n int, now time.Time) error {
	step := consoleSpan / time.Duration(n)
	statuses := []string{"succeeded", "succeeded", "succeeded", "succeeded", "succeeded", "succeeded", "succeeded", "dead", "queued", "running"}
	jobs := pgx.CopyFromFunc(rowsOf(n, func(i int) []any {
		created := now.Add(-time.Minute - time.Duration(i)*step)
		return []any{b.t.Tenant, fmt.Sprintf("%s%07d", prefix, i), fmt.Sprintf("type-%02d", i%20), fmt.Sprintf("queue-%d", i%5),
			statuses[i%len(statuses)], 1, 3, fmt.Sprintf(`{"n":%d}`, i), consoleTags(i), created, 1, 0}
	}))
	if _, err := b.probe.pg.CopyFrom(ctx, pgx.Identifier{"jobs"}, []string{"tenant_id", "id", "type", "queue", "status", "attempt",
		"max_attempts", "payload", "tags", "created_at", "pos_attempt", "pos_phase"}, jobs); err != nil {
		return fmt.Errorf("jobs: %w", err)
	}
	classes := []string{"app_error", "retryable", "permanent", "timeout", "worker_lost"}
	entries := pgx.CopyFromFunc(rowsOf(n, func(i int) []any {
		dead := now.Add(-time.Minute - time.Duration(i)*step)
		typ, queue, tags := fmt.Sprintf("type-%02d", i%20), fmt.Sprintf("queue-%d", i%5), consoleTags(i)
		spec, _ := json.Marshal(map[string]any{"type": typ, "queue": queue, "payload": map[string]int{"n": i}, "tags": tags,
			"max_attempts": 3, "pool": "short", "priority": 0})
		return []any{b.t.Tenant, fmt.Sprintf("%s%07d", prefix, i), 3, typ, queue, string(spec), "[]", classes[i%len(classes)],
			fmt.Sprintf("upstream answered 502 on shard %d", i), dead.Add(-time.Hour), dead, "bench-" + fmt.Sprint(i), tags}
	}))
	if _, err := b.probe.pg.CopyFrom(ctx, pgx.Identifier{"dlq_entries"}, []string{"tenant_id", "job_id", "attempt", "type", "queue",
		"spec", "history", "error_class", "error_message", "created_at", "dead_at", "event_id", "tags"}, entries); err != nil {
		return fmt.Errorf("dlq_entries: %w", err)
	}
	// Fresh statistics, as autovacuum would have after the rows grew.
	_, err := b.probe.pg.Exec(ctx, `ANALYZE jobs; ANALYZE dlq_entries`)
	return err
}

// consoleTags are the tags of seeded row i: one of 200, and "vip" on every
// tenth row.
func consoleTags(i int) []string {
	tags := []string{fmt.Sprintf("t-%03d", i%200)}
	if i%10 == 0 {
		tags = append(tags, "vip")
	}
	return tags
}

// rowsOf feeds COPY n rows made by row.
func rowsOf(n int, row func(i int) []any) func() ([]any, error) {
	i := 0
	return func() ([]any, error) {
		if i == n {
			return nil, nil
		}
		i++
		return row(i - 1), nil
	}
}

// unseedConsole deletes the seeded rows again.
func (b *Bench) unseedConsole(prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, table := range []string{"jobs WHERE tenant_id = $1 AND id", "dlq_entries WHERE tenant_id = $1 AND job_id"} {
		if _, err := b.probe.pg.Exec(ctx, `DELETE FROM `+table+` LIKE $2`, b.t.Tenant, prefix+"%"); err != nil {
			fmt.Fprintln(b.log, "bench: console: removing the seeded rows:", err)
		}
	}
}

// consoleCalls are the calls the Jobs and Dead letters pages make: the
// first page, a page half-way down (its cursor as the API issues it), and
// each filter.
func (b *Bench) consoleCalls(ctx context.Context, now time.Time) ([]consoleCall, error) {
	mid := now.Add(-consoleSpan / 2).Format(time.RFC3339)
	day := func(d int) string {
		return url.QueryEscape(now.Add(-time.Duration(d) * 24 * time.Hour).Format(time.RFC3339))
	}
	jobsDeep, err := b.cursorAt(ctx, "/v1/jobs?limit=1&created_to="+url.QueryEscape(mid))
	if err != nil {
		return nil, err
	}
	dlqDeep, err := b.cursorAt(ctx, "/v1/dlq?limit=1&to="+url.QueryEscape(mid))
	if err != nil {
		return nil, err
	}
	return []consoleCall{
		{"jobs_first_page", "/v1/jobs?limit=50"},
		{"jobs_deep_page", "/v1/jobs?limit=50&cursor=" + url.QueryEscape(jobsDeep)},
		{"jobs_status_dead", "/v1/jobs?limit=50&status=dead"},
		{"jobs_type", "/v1/jobs?limit=50&type=type-07"},
		{"jobs_tag", "/v1/jobs?limit=50&tag=t-007"},
		{"jobs_created_range", "/v1/jobs?limit=50&created_from=" + day(20) + "&created_to=" + day(19)},
		{"dlq_first_page", "/v1/dlq?limit=50"},
		{"dlq_deep_page", "/v1/dlq?limit=50&cursor=" + url.QueryEscape(dlqDeep)},
		{"dlq_class", "/v1/dlq?limit=50&class=timeout"},
		{"dlq_tag", "/v1/dlq?limit=50&tag=t-007"},
		{"dlq_text", "/v1/dlq?limit=50&q=" + url.QueryEscape("shard 4242")},
		{"dlq_dead_range", "/v1/dlq?limit=50&from=" + day(20) + "&to=" + day(19)},
	}, nil
}

// cursorAt returns the next_cursor of path: a cursor the API issues for a
// position deep in the listing.
func (b *Bench) cursorAt(ctx context.Context, path string) (string, error) {
	raw, err := b.get(ctx, path)
	if err != nil {
		return "", err
	}
	var out struct {
		Next string `json:"next_cursor"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Next == "" {
		return "", fmt.Errorf("%s: no cursor (%v): %s", path, err, truncate(raw, 200))
	}
	return out.Next, nil
}

// timeCall times consoleReps calls of path, after one warm-up, in ms.
func (b *Bench) timeCall(ctx context.Context, path string) ([]float64, error) {
	if _, err := b.get(ctx, path); err != nil {
		return nil, err
	}
	ms := make([]float64, 0, consoleReps)
	for range consoleReps {
		t0 := time.Now()
		if _, err := b.get(ctx, path); err != nil {
			return nil, err
		}
		ms = append(ms, Ms(time.Since(t0)))
	}
	return ms, nil
}

// get calls path with the bench's key and returns the body of a 200.
func (b *Bench) get(ctx context.Context, path string) ([]byte, error) {
	return getOK(ctx, b.client, b.t.API+path, b.t.Key)
}

// getOK GETs url (with bearer as its Authorization, unless "") and returns
// the body of a 200; any other status is an error with the body's start.
func getOK(ctx context.Context, c *http.Client, url, bearer string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", resp.StatusCode, truncate(raw, 200))
	}
	return raw, err
}
