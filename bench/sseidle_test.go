package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// TestSSEIdleFailsWhenStreamsAreRefused: when the server refuses some of
// the streams (as the per-tenant cap did), sse-idle reports a failure and
// no memory figure, instead of the RSS of fewer streams than specified.
func TestSSEIdleFailsWhenStreamsAreRefused(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%3 == 0 {
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"code":"too_many_streams"}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	defer srv.CloseClientConnections()
	b := &Bench{t: &Target{API: srv.URL, Key: "k", PID: os.Getpid()}, sizes: Sizes{SSE: 6}, log: io.Discard}
	r := b.sseIdle(context.Background())
	if r.failure == "" || !strings.Contains(r.failure, "2 of 6 SSE streams failed") || !strings.Contains(r.failure, "too_many_streams") {
		t.Fatalf("failure %q, want 2 of 6 streams failed with the server's error", r.failure)
	}
	if r.RSSMB != 0 {
		t.Fatalf("rss_mb = %v reported for a failed run", r.RSSMB)
	}
}
