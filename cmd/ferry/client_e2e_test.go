package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferryhq/ferry/client"
)

// faultyTransport injects the faults the client must survive: a request
// whose answer is lost after the server applied it, and an event stream
// cut after a few messages.
type faultyTransport struct {
	mu sync.Mutex
	// loseAnswer: the next request "METHOD path" is sent, then its answer
	// is dropped and a network error returned.
	loseAnswer map[string]bool
	// cutStreamAfter: the first event stream is cut after this many
	// messages (blank-line terminated blocks); 0 never cuts.
	cutStreamAfter int
	streams        []string // Last-Event-ID of each events request
	lost           int
}

func (ft *faultyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	key := r.Method + " " + r.URL.Path
	ft.mu.Lock()
	lose := ft.loseAnswer[key]
	delete(ft.loseAnswer, key)
	events := strings.HasSuffix(r.URL.Path, "/events")
	cut := 0
	if events {
		ft.streams = append(ft.streams, r.Header.Get("Last-Event-ID"))
		if len(ft.streams) == 1 {
			cut = ft.cutStreamAfter
		}
	}
	ft.mu.Unlock()
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if lose {
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		ft.mu.Lock()
		ft.lost++
		ft.mu.Unlock()
		return nil, errors.New("injected: connection reset after the request was sent")
	}
	if cut > 0 && res.StatusCode == http.StatusOK {
		res.Body = &cutBody{rc: res.Body, left: cut}
	}
	return res, nil
}

// cutBody passes a stream through until left messages went by, then fails
// as a dropped connection does.
type cutBody struct {
	rc   io.ReadCloser
	left int
	tail []byte // the end of the previous read, to see "\n\n" across reads
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		b.rc.Close()
		return 0, io.ErrUnexpectedEOF
	}
	n, err := b.rc.Read(p)
	for i := 0; i < n; i++ {
		if p[i] == '\n' && (i > 0 && p[i-1] == '\n' || i == 0 && bytes.HasSuffix(b.tail, []byte("\n"))) {
			b.left--
			if b.left == 0 {
				return i + 1, nil
			}
		}
	}
	if n > 0 {
		b.tail = append(b.tail[:0], p[n-1])
	}
	return n, err
}

func (b *cutBody) Close() error { return b.rc.Close() }

func newE2EClient(t *testing.T, e *e2e, ft *faultyTransport) *client.Client {
	t.Helper()
	c, err := client.New(e.base, e.key, client.WithHTTPClient(&http.Client{Transport: ft}),
		client.WithRetry(client.RetryPolicy{BaseDelay: 50 * time.Millisecond, MaxDelay: 500 * time.Millisecond}),
		client.WithUserAgent("ferry-e2e"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestClientJobs drives the Go client against the whole stack: submission
// with lost answers and repeated keys, batches, lists across pages, wait,
// an event stream cut mid-way, and cancel.
func TestClientJobs(t *testing.T) {
	e := startStack(t, nil)
	ft := &faultyTransport{loseAnswer: map[string]bool{"POST /v1/jobs": true}}
	c := newE2EClient(t, e, ft)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	first := clientSubmitDeduplicates(t, ctx, c, ft)
	batchIDs := clientBatch(t, ctx, c)
	clientListPages(t, ctx, c, append(batchIDs, first))
	// A client of its own: its first event stream is the one cut.
	cut := &faultyTransport{cutStreamAfter: 4} // the preamble and 3 events
	clientEventsResume(t, ctx, newE2EClient(t, e, cut), cut)
	clientCancel(t, ctx, c)

	if _, err := c.Get(ctx, "job_00000000-0000-7000-8000-000000000000"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Get unknown job: %v, want ErrNotFound", err)
	}
}

// clientSubmitDeduplicates: the first answer is lost, the client retries
// with the same key and gets the job the first attempt created; submitting
// again with the key is deduplicated; Wait sees it succeed.
func clientSubmitDeduplicates(t *testing.T, ctx context.Context, c *client.Client, ft *faultyTransport) string {
	t.Helper()
	req := client.JobRequest{Type: "sleep", Payload: map[string]int{"ms": 200}, Tags: []string{"client-e2e"}}
	res, err := c.Submit(ctx, req, client.WithIdempotencyKey("client-e2e-1"))
	if err != nil {
		t.Fatal(err)
	}
	ft.mu.Lock()
	lost := ft.lost
	ft.mu.Unlock()
	if lost != 1 || !res.Deduplicated {
		t.Fatalf("after a lost answer: lost=%d, result %+v; want the retry deduplicated", lost, res)
	}
	again, err := c.Submit(ctx, req, client.WithIdempotencyKey("client-e2e-1"))
	if err != nil || !again.Deduplicated || again.Job.ID != res.Job.ID {
		t.Fatalf("same key again: %+v, %v; want job %s deduplicated", again, err, res.Job.ID)
	}
	other := req
	other.Payload = map[string]int{"ms": 1}
	if _, err := c.Submit(ctx, other, client.WithIdempotencyKey("client-e2e-1")); !errors.Is(err, client.ErrIdempotencyConflict) {
		t.Fatalf("same key, other body: %v, want ErrIdempotencyConflict", err)
	}
	done, err := c.Wait(ctx, res.Job.ID, nil)
	if err != nil || done.Status != client.StatusSucceeded || !strings.Contains(string(done.Result), `"slept_ms":200`) {
		t.Fatalf("Wait: %+v, %v", done, err)
	}
	n := 0
	for j, err := range c.Jobs(ctx, client.ListOptions{Tags: []string{"client-e2e"}}) {
		if err != nil {
			t.Fatal(err)
		}
		if j.ID != res.Job.ID {
			t.Fatalf("a second job %s exists for one idempotent submission", j.ID)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("%d jobs tagged client-e2e, want 1", n)
	}
	return res.Job.ID
}

// clientBatch: per-item results; the same batch again is deduplicated.
func clientBatch(t *testing.T, ctx context.Context, c *client.Client) []string {
	t.Helper()
	var reqs []client.JobRequest
	for i := range 6 {
		reqs = append(reqs, client.JobRequest{Type: "noop", Payload: map[string]int{"i": i}, Tags: []string{"client-batch"}})
	}
	reqs = append(reqs, client.JobRequest{Type: "noop", Priority: client.Int(12)})
	res, err := c.SubmitBatch(ctx, reqs, client.WithIdempotencyKey("client-batch-1"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, it := range res.Items[:6] {
		if it.Err != nil || it.Job == nil || it.Deduplicated {
			t.Fatalf("item %d: %+v", i, it)
		}
		ids = append(ids, it.Job.ID)
	}
	if bad := res.Items[6]; bad.Err == nil || !errors.Is(bad.Err, client.ErrValidation) || bad.Err.Fields["priority"] == "" {
		t.Fatalf("invalid item: %+v", bad)
	}
	again, err := c.SubmitBatch(ctx, reqs[:6], client.WithIdempotencyKey("client-batch-1"))
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range again.Items {
		if it.Job == nil || it.Job.ID != ids[i] || !it.Deduplicated {
			t.Fatalf("batch again, item %d: %+v; want job %s deduplicated", i, it, ids[i])
		}
	}
	return ids
}

// clientListPages: the iterator walks pages of 2 and yields every job once.
func clientListPages(t *testing.T, ctx context.Context, c *client.Client, want []string) {
	t.Helper()
	for _, id := range want {
		if _, err := c.Wait(ctx, id, &client.WaitOptions{PollInterval: 200 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	for j, err := range c.Jobs(ctx, client.ListOptions{Status: client.StatusSucceeded, Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		seen[j.ID]++
	}
	if len(seen) != len(want) {
		t.Fatalf("iterator saw %d jobs %v, want %d", len(seen), seen, len(want))
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Fatalf("job %s seen %d times: %v", id, seen[id], seen)
		}
	}
}

// clientEventsResume: the stream is cut after a few messages; the client
// resumes with Last-Event-ID and yields exactly the job's history, as a
// fresh replay shows it, without duplicates or gaps.
func clientEventsResume(t *testing.T, ctx context.Context, c *client.Client, ft *faultyTransport) {
	t.Helper()
	res, err := c.Submit(ctx, client.JobRequest{Type: "sleep", Payload: map[string]int{"ms": 1500}})
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	var lastBeforeCut int64
	for ev, err := range c.JobEvents(ctx, res.Job.ID, nil) {
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, fmt.Sprintf("%d/%s/%s", ev.Seq, ev.Type, ev.ID))
		ft.mu.Lock()
		if len(ft.streams) == 1 {
			lastBeforeCut = ev.Seq
		}
		ft.mu.Unlock()
	}
	ft.mu.Lock()
	streams := append([]string(nil), ft.streams...)
	ft.mu.Unlock()
	if len(streams) < 2 || streams[0] != "" || streams[1] != fmt.Sprint(lastBeforeCut) {
		t.Fatalf("stream requests with Last-Event-ID %q; want a reconnect resuming at %d", streams, lastBeforeCut)
	}
	var replay []string
	for ev, err := range c.JobEvents(ctx, res.Job.ID, nil) {
		if err != nil {
			t.Fatal(err)
		}
		replay = append(replay, fmt.Sprintf("%d/%s/%s", ev.Seq, ev.Type, ev.ID))
	}
	if strings.Join(live, " ") != strings.Join(replay, " ") {
		t.Fatalf("resumed stream differs from the replay:\n live   %v\n replay %v", live, replay)
	}
	if len(live) < 4 || !strings.Contains(live[0], "/enqueued/") || !strings.Contains(live[len(live)-1], "/completed/") {
		t.Fatalf("events %v: want enqueued … completed", live)
	}
}

// clientCancel: a running job is cancelled; cancelling again is
// ErrJobFinished.
func clientCancel(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()
	res, err := c.Submit(ctx, client.JobRequest{Type: "sleep", Payload: map[string]int{"ms": 60000}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, res.Job.ID); err != nil {
		t.Fatal(err)
	}
	done, err := c.Wait(ctx, res.Job.ID, nil)
	if err != nil || done.Status != client.StatusCancelled {
		t.Fatalf("after cancel: %+v, %v", done, err)
	}
	if _, err := c.Cancel(ctx, res.Job.ID); !errors.Is(err, client.ErrJobFinished) {
		t.Fatalf("cancel a cancelled job: %v, want ErrJobFinished", err)
	}
}

// TestClientDLQAndWebhooks: a failing job is dead-lettered, found, counted
// by a dry run, re-driven with an edited payload (once), and webhooks are
// created, listed, rotated and deleted through the client.
func TestClientDLQAndWebhooks(t *testing.T) {
	e := startStack(t, nil)
	c := newE2EClient(t, e, &faultyTransport{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	res, err := c.Submit(ctx, client.JobRequest{Type: "fail", MaxAttempts: 1,
		Payload: map[string]any{"times": 5, "class": "app_error"}})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := c.Wait(ctx, res.Job.ID, nil)
	if err != nil || dead.Status != client.StatusDead {
		t.Fatalf("Wait: %+v, %v", dead, err)
	}
	var entry *client.DLQEntry
	waitFor(t, 20*time.Second, "DLQ entry", func() bool {
		entry, err = c.GetDLQ(ctx, res.Job.ID)
		return err == nil
	})
	if entry.Error.Class != "app_error" || len(entry.History) != 1 {
		t.Fatalf("entry %+v", entry)
	}
	n := 0
	for en, err := range c.DLQEntries(ctx, client.DLQListOptions{DLQFilter: client.DLQFilter{Class: "app_error"}}) {
		if err != nil || en.ID != res.Job.ID {
			t.Fatalf("DLQ entry %+v, %v", en, err)
		}
		n++
	}
	dry, err := c.RedriveDLQ(ctx, client.BulkRedriveRequest{Filter: client.DLQFilter{Type: "fail"}, DryRun: true})
	if err != nil || n != 1 || !dry.DryRun || dry.Count != 1 || len(dry.Sample) != 1 {
		t.Fatalf("list saw %d; dry run %+v, %v", n, dry, err)
	}
	if s, err := c.SuppressDLQ(ctx, res.Job.ID); err != nil || !s.Suppressed {
		t.Fatalf("suppress: %+v, %v", s, err)
	}
	if s, err := c.UnsuppressDLQ(ctx, res.Job.ID); err != nil || s.Suppressed {
		t.Fatalf("unsuppress: %+v, %v", s, err)
	}
	rd, err := c.Redrive(ctx, res.Job.ID, &client.RedriveRequest{Payload: json.RawMessage(`{"times":0}`)})
	if err != nil || rd.Deduplicated || rd.Job.RedrivenFrom != res.Job.ID {
		t.Fatalf("redrive: %+v, %v", rd, err)
	}
	ok, err := c.Wait(ctx, rd.Job.ID, nil)
	if err != nil || ok.Status != client.StatusSucceeded {
		t.Fatalf("re-driven job: %+v, %v", ok, err)
	}
	again, err := c.Redrive(ctx, res.Job.ID, nil)
	if err != nil || !again.Deduplicated || again.Job.ID != rd.Job.ID {
		t.Fatalf("second redrive: %+v, %v", again, err)
	}
	if _, err := c.GetDLQ(ctx, "job_missing"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("GetDLQ unknown: %v", err)
	}
	clientWebhooks(t, ctx, c)
}

func clientWebhooks(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer receiver.Close()
	wh, err := c.CreateWebhook(ctx, client.WebhookRequest{URL: receiver.URL + "/hook",
		EventTypes: []client.EventType{client.EventCompleted}, Description: "client e2e"})
	if err != nil || !strings.HasPrefix(wh.Secret, "whsec_") || wh.Status != "active" {
		t.Fatalf("create webhook: %+v, %v", wh, err)
	}
	found := false
	for w, err := range c.Webhooks(ctx, client.PageOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		found = found || w.ID == wh.ID && w.Secret == ""
	}
	if !found {
		t.Fatalf("webhook %s not listed (without its secret)", wh.ID)
	}
	rot, err := c.RotateWebhookSecret(ctx, wh.ID)
	if err != nil || rot.Secret == wh.Secret || !strings.HasPrefix(rot.Secret, "whsec_") || rot.PreviousSecretExpiresAt == nil {
		t.Fatalf("rotate: %+v, %v", rot, err)
	}
	if _, err := c.ListDeliveries(ctx, wh.ID, client.PageOptions{Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteWebhook(ctx, wh.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetWebhook(ctx, wh.ID); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("deleted webhook: %v, want ErrNotFound", err)
	}
	if _, err := c.CreateWebhook(ctx, client.WebhookRequest{URL: "ftp://example.com"}); !errors.Is(err, client.ErrValidation) {
		t.Fatalf("invalid url: %v, want ErrValidation", err)
	}
}
