package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/outbound"
	"github.com/ferryhq/ferry/services/worker/workertype"
)

func job(typ string, payload string) *workertype.Job {
	return workertype.NewJob(workertype.Job{ID: "j1", Attempt: 1, Type: typ, Payload: json.RawMessage(payload)}, nil)
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := map[string]time.Duration{
		"":                              0,
		"120":                           2 * time.Minute,
		"-5":                            0,
		"soon":                          0,
		"Thu, 01 Jan 2026 00:00:30 GMT": 30 * time.Second,
		"Wed, 31 Dec 2025 23:00:00 GMT": 0,
		"99999999999":                   maxRetryAfter,
	}
	for in, want := range cases {
		if got := retryAfter(in, now); got != want {
			t.Errorf("retryAfter(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestHTTPClasses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/text":
			w.Write([]byte(strings.Repeat("x", MaxResponseBody+10)))
		case "/slow":
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
		case "/408":
			w.WriteHeader(408)
		case "/429":
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(429)
		case "/400":
			w.WriteHeader(400)
		}
	}))
	defer srv.Close()
	h := NewHTTP(Options{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	run := func(p map[string]any) (any, error) {
		b, _ := json.Marshal(p)
		return h.Handle(context.Background(), job("http", string(b)))
	}

	res, err := run(map[string]any{"url": srv.URL + "/text"})
	if r, ok := res.(HTTPResult); err != nil || !ok || !r.Truncated || len(r.Body.(string)) != MaxResponseBody {
		t.Errorf("text: %v", err)
	}
	for path, want := range map[string]schema.ErrorClass{
		"/408": schema.ClassRetryable, "/429": schema.ClassRetryable, "/400": schema.ClassPermanent,
	} {
		_, err := run(map[string]any{"url": srv.URL + path})
		if c, _ := workertype.ClassOf(err); c != want {
			t.Errorf("%s: class %s (%v)", path, c, err)
		}
	}
	if _, err := run(map[string]any{"url": srv.URL + "/429"}); err != nil {
		if _, ra := workertype.ClassOf(err); ra != 2*time.Second {
			t.Errorf("429 retry after %s", ra)
		}
	}
	_, err = run(map[string]any{"url": srv.URL + "/slow", "timeout": "100ms"})
	if c, _ := workertype.ClassOf(err); c != schema.ClassTimeout {
		t.Errorf("slow: class %s (%v)", c, err)
	}
	for _, bad := range []map[string]any{{"url": "ftp://x/"}, {"url": "/relative"}, {"url": srv.URL, "timeout": 5}} {
		if _, err := run(bad); !isPermanent(err) {
			t.Errorf("%v: %v", bad, err)
		}
	}
	// Connection refused is a network error: retryable.
	ln := httptest.NewServer(http.NotFoundHandler())
	addr := ln.URL
	ln.Close()
	if _, err := run(map[string]any{"url": addr}); err == nil {
		t.Error("closed server: no error")
	} else if c, _ := workertype.ClassOf(err); c != schema.ClassRetryable {
		t.Errorf("closed server: class %s (%v)", c, err)
	}
}

func TestHTTPBlocked(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	_, err := NewHTTP(Options{}).Handle(context.Background(), job("http", `{"url":"`+srv.URL+`"}`))
	if !isPermanent(err) || !errors.Is(err, outbound.ErrBlocked) {
		t.Fatalf("err = %v", err)
	}
}

func TestSleepHonoursCancellation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Sleep(ctx, job("sleep", `{"ms":60000}`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}

func isPermanent(err error) bool {
	c, _ := workertype.ClassOf(err)
	return err != nil && c == schema.ClassPermanent
}
