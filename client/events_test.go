package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// sseJob is a fake job stream: the events of job_1 at positions 1..n, the
// last one completed. It drops the connection after dropAfter events of
// the first connection, and records each request's Last-Event-ID.
type sseJob struct {
	t         *testing.T
	n         int
	dropAfter int
	mu        sync.Mutex
	lastIDs   []string
}

func (s *sseJob) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.lastIDs = append(s.lastIDs, r.Header.Get("Last-Event-ID"))
	conn := len(s.lastIDs)
	s.mu.Unlock()
	from := 0
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		from, _ = strconv.Atoi(v)
	}
	if from >= s.n {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, ": ferry sse-bridge\nretry: 10\n\n")
	for seq := from + 1; seq <= s.n; seq++ {
		if conn == 1 && seq > s.dropAfter {
			http.NewResponseController(w).Flush()
			dropConnection(s.t, w)
			return
		}
		typ := "progress"
		switch seq {
		case 1:
			typ = "enqueued"
		case s.n:
			typ = "completed"
		}
		fmt.Fprintf(w, ": keep-alive\nid: %d\r\nevent: %s\ndata: {\"id\":\"ce-%d\",\"type\":\"%s\",\"job_id\":\"job_1\",\"tenant_id\":\"acme\",\"attempt\":1,\"data\":{}}\n\n",
			seq, typ, seq, typ)
	}
}

// TestJobEventsResume: after a dropped connection the stream resumes with
// Last-Event-ID; every event arrives once, in order, and the iteration
// ends after the final event.
func TestJobEventsResume(t *testing.T) {
	s := &sseJob{t: t, n: 6, dropAfter: 3}
	c := newTestClient(t, s.ServeHTTP, fastRetry)
	var got []string
	for ev, err := range c.JobEvents(context.Background(), "job_1", nil) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%s:%s", ev.Seq, ev.Type, ev.ID))
	}
	want := "1:enqueued:ce-1 2:progress:ce-2 3:progress:ce-3 4:progress:ce-4 5:progress:ce-5 6:completed:ce-6"
	if strings.Join(got, " ") != want {
		t.Fatalf("events\n got %s\nwant %s", strings.Join(got, " "), want)
	}
	if ids := strings.Join(s.lastIDs, ","); ids != ",3" {
		t.Fatalf("Last-Event-ID per connection %q, want \",3\"", ids)
	}
}

// TestJobEventsFinished: resuming at the final event answers 204 and the
// stream ends without error.
func TestJobEventsFinished(t *testing.T) {
	s := &sseJob{t: t, n: 2, dropAfter: 99}
	c := newTestClient(t, s.ServeHTTP)
	last := int64(2)
	for ev, err := range c.JobEvents(context.Background(), "job_1", &StreamOptions{LastEventID: &last}) {
		t.Fatalf("yielded %+v, %v after the final event", ev, err)
	}
}

// TestEventsErrorEnds: a 404 is yielded as ErrNotFound and not retried.
func TestEventsErrorEnds(t *testing.T) {
	var rec recorder
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		apiError(w, 404, CodeJobNotFound, "no job")
	}, fastRetry)
	var errs []error
	for _, err := range c.JobEvents(context.Background(), "job_x", nil) {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], ErrNotFound) || len(rec.all()) != 1 {
		t.Fatalf("errors %v after %d requests", errs, len(rec.all()))
	}
}

// TestTenantEventsFilterAndReset: filters travel as repeated parameters; a
// reset control message is yielded as EventReset; overflow reconnects.
func TestTenantEventsFilterAndReset(t *testing.T) {
	var mu sync.Mutex
	var queries, lastIDs []string
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		n := len(queries)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		if n == 1 {
			fmt.Fprint(w, "id: 50\nevent: reset\ndata: {\"last_event_id\":\"7\",\"reason\":\"expired\"}\n\n")
			fmt.Fprint(w, "id: 51\nevent: enqueued\ndata: {\"id\":\"a\",\"type\":\"enqueued\",\"job_id\":\"job_1\"}\n\n")
			fmt.Fprint(w, "id: 51\nevent: overflow\ndata: {\"last_event_id\":\"51\",\"reason\":\"slow\"}\n\n")
			return
		}
		fmt.Fprint(w, "id: 52\nevent: started\ndata: {\"id\":\"b\",\"type\":\"started\",\"job_id\":\"job_1\"}\n\n")
	}, fastRetry)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seven := int64(7)
	var got []string
	for ev, err := range c.Events(ctx, &EventFilter{Queues: []string{"q1", "q2"}, Events: []EventType{EventEnqueued, EventStarted}},
		&StreamOptions{LastEventID: &seven}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%s:%s", ev.Seq, ev.Type, ev.Reason))
		if len(got) == 3 {
			break
		}
	}
	if g := strings.Join(got, " "); g != "50:reset:expired 51:enqueued: 52:started:" {
		t.Fatalf("events %s", g)
	}
	if queries[0] != "event=enqueued&event=started&queue=q1&queue=q2" || lastIDs[0] != "7" || lastIDs[1] != "51" {
		t.Fatalf("queries %q, Last-Event-IDs %q", queries, lastIDs)
	}
}

func TestSSEParser(t *testing.T) {
	in := ": comment\r\nretry: 1500\r\n\r\nid: 1\nevent: x\ndata: line1\ndata:line2\n\nid: 2\rdata: {}\r\rdata: unterminated"
	p := newSSEParser(strings.NewReader(in))
	var got []string
	for {
		m, err := p.next()
		if err != nil {
			break
		}
		got = append(got, fmt.Sprintf("[%s|%s|%q|%v]", m.id, m.event, m.data, m.retry))
	}
	want := `[||""|1.5s] [1|x|"line1\nline2"|0s] [2||"{}"|0s]`
	if g := strings.Join(got, " "); g != want {
		t.Fatalf("got  %s\nwant %s", g, want)
	}
}

// TestWaitPollsWithoutStream: when the event stream is unavailable Wait
// falls back to polling and returns the terminal job.
func TestWaitPollsWithoutStream(t *testing.T) {
	var mu sync.Mutex
	gets := 0
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") {
			apiError(w, http.StatusTooManyRequests, CodeTooManyStreams, "too many")
			return
		}
		mu.Lock()
		gets++
		n := gets
		mu.Unlock()
		st := StatusRunning
		if n >= 3 {
			st = StatusSucceeded
		}
		writeJSON(w, 200, jobJSON("job_1", st, false))
	}, WithRetry(RetryPolicy{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	j, err := c.Wait(ctx, "job_1", &WaitOptions{PollInterval: 20 * time.Millisecond})
	if err != nil || j.Status != StatusSucceeded {
		t.Fatalf("Wait = %+v, %v", j, err)
	}
}

// TestWaitFollowsStream: with a long poll interval, Wait returns soon
// after the stream's final event rather than at the next poll.
func TestWaitFollowsStream(t *testing.T) {
	var mu sync.Mutex
	done := false
	c := newTestClient(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "id: 1\nevent: enqueued\ndata: {\"type\":\"enqueued\"}\n\n")
			http.NewResponseController(w).Flush()
			time.Sleep(200 * time.Millisecond)
			mu.Lock()
			done = true
			mu.Unlock()
			fmt.Fprint(w, "id: 2\nevent: completed\ndata: {\"type\":\"completed\"}\n\n")
			return
		}
		mu.Lock()
		st := StatusRunning
		if done {
			st = StatusSucceeded
		}
		mu.Unlock()
		writeJSON(w, 200, jobJSON("job_1", st, false))
	})
	start := time.Now()
	j, err := c.Wait(context.Background(), "job_1", &WaitOptions{PollInterval: time.Minute})
	if err != nil || j.Status != StatusSucceeded {
		t.Fatalf("Wait = %+v, %v", j, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Wait took %v: it did not follow the stream", d)
	}
}
