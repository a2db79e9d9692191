package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/callback"
	"github.com/ferryhq/ferry/services/worker/workertype"
)

// fakeCallbacks records what the handler granted and settled.
type fakeCallbacks struct {
	mu      sync.Mutex
	issued  []callback.Claims
	settled []callback.Claims
	stale   bool
	err     error
}

func (f *fakeCallbacks) Issue(_ context.Context, c callback.Claims, _ time.Time) (callback.Grant, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil || f.stale {
		return callback.Grant{}, false, f.err
	}
	f.issued = append(f.issued, c)
	return callback.Grant{URL: "https://ferry.test/v1/jobs/" + c.JobID + "/callback", Token: "fcb_" + c.DispatchID}, true, nil
}

func (f *fakeCallbacks) Settle(_ context.Context, c callback.Claims, _ time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settled = append(f.settled, c)
	return nil
}

// answering is a receiver answering status, recording the callback headers.
func answering(t *testing.T, status int, hits *atomic.Int32, got chan<- http.Header) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		got <- r.Header.Clone()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func asyncJob(t *testing.T, payload map[string]any) *workertype.Job {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return workertype.NewJob(workertype.Job{ID: "job_a", TenantID: "t_1", Attempt: 2, DispatchID: "d-9", Type: "http", Payload: b}, nil)
}

// TestHTTPAsyncHandOver: an async job's request carries its callback URL,
// token and lease; a 202 hands the attempt over (Detached, with the lease),
// any other answer settles the grant and ends the attempt as before.
func TestHTTPAsyncHandOver(t *testing.T) {
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	for _, tc := range []struct {
		name    string
		status  int
		lease   any
		want    time.Duration
		settled bool
		class   schema.ErrorClass // of a failure; "" for a success or a hand-over
	}{
		{"202 with the payload's lease", http.StatusAccepted, "90s", 90 * time.Second, false, ""},
		{"202 with the default lease", http.StatusAccepted, nil, 7 * time.Minute, false, ""},
		{"200 completes at once", http.StatusOK, nil, 0, true, ""},
		{"503 fails retryable", http.StatusServiceUnavailable, nil, 0, true, schema.ClassRetryable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int32
			got := make(chan http.Header, 1)
			url := answering(t, tc.status, &hits, got)
			cb := &fakeCallbacks{}
			h := NewHTTP(Options{Allow: allow, Signer: &fakeSigner{}, Callbacks: cb, AsyncLease: 7 * time.Minute})
			p := map[string]any{"url": url, "async": true}
			if tc.lease != nil {
				p["lease"] = tc.lease
			}
			res, err := h.Handle(context.Background(), asyncJob(t, p))
			hd := <-got
			if hd.Get(callback.HeaderToken) != "fcb_d-9" || hd.Get(callback.HeaderURL) != "https://ferry.test/v1/jobs/job_a/callback" {
				t.Fatalf("callback headers: %v", hd)
			}
			lease := cb.issued[0].Lease
			if c := cb.issued[0]; c.TenantID != "t_1" || c.JobID != "job_a" || c.Attempt != 2 || c.DispatchID != "d-9" {
				t.Fatalf("granted %+v", c)
			}
			if want := strconv.Itoa(int(lease / time.Second)); hd.Get(callback.HeaderLease) != want {
				t.Fatalf("lease header %q, want %s (%s)", hd.Get(callback.HeaderLease), want, lease)
			}
			if got := len(cb.settled) == 1; got != tc.settled {
				t.Fatalf("settled %v, want %v", cb.settled, tc.settled)
			}
			var d *workertype.Detached
			switch {
			case tc.status == http.StatusAccepted:
				if !errors.As(err, &d) || d.Lease != tc.want || lease != tc.want {
					t.Fatalf("202: %v %v (granted lease %s), want Detached with %s", res, err, lease, tc.want)
				}
			case tc.class != "":
				if c, _ := workertype.ClassOf(err); c != tc.class {
					t.Fatalf("%d: %v, want class %s", tc.status, err, tc.class)
				}
			case err != nil || res.(HTTPResult).Status != tc.status:
				t.Fatalf("%d: %v %v", tc.status, res, err)
			}
		})
	}
}

// TestHTTPAsyncRefusals: a job that cannot be async fails permanent before
// anything is sent; a stale dispatch sends nothing; a 202 to a job that is
// not async is a plain success, as it always was.
func TestHTTPAsyncRefusals(t *testing.T) {
	allow := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	var hits atomic.Int32
	got := make(chan http.Header, 8)
	url := answering(t, http.StatusAccepted, &hits, got)
	for _, tc := range []struct {
		name    string
		cb      Callbacks
		payload map[string]any
		class   schema.ErrorClass
		want    string
	}{
		{"lease without async", &fakeCallbacks{}, map[string]any{"url": url, "lease": "1m"}, schema.ClassPermanent, "async jobs only"},
		{"lease too short", &fakeCallbacks{}, map[string]any{"url": url, "async": true, "lease": "10ms"}, schema.ClassPermanent, "between 1s and 24h"},
		{"lease too long", &fakeCallbacks{}, map[string]any{"url": url, "async": true, "lease": "25h"}, schema.ClassPermanent, "between 1s and 24h"},
		{"no callbacks", nil, map[string]any{"url": url, "async": true}, schema.ClassPermanent, "not enabled"},
		{"no callback URL", &fakeCallbacks{err: callback.ErrNoCallbackURL}, map[string]any{"url": url, "async": true}, schema.ClassPermanent, "FERRY_CALLBACK_URL"},
		{"postgres down", &fakeCallbacks{err: errors.New("pg down")}, map[string]any{"url": url, "async": true}, schema.ClassRetryable, "pg down"},
		{"stale dispatch", &fakeCallbacks{stale: true}, map[string]any{"url": url, "async": true}, schema.ClassAppError, "stale"},
	} {
		opts := Options{Allow: allow, Signer: &fakeSigner{}, Callbacks: tc.cb}
		if tc.cb == nil {
			opts.Callbacks = nil
		}
		_, err := NewHTTP(opts).Handle(context.Background(), asyncJob(t, tc.payload))
		if c, _ := workertype.ClassOf(err); err == nil || c != tc.class || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v (class %s), want %s with %q", tc.name, err, c, tc.class, tc.want)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests sent for refused jobs", n)
	}

	res, err := NewHTTP(Options{Allow: allow, Signer: &fakeSigner{}, Callbacks: &fakeCallbacks{}}).Handle(context.Background(), asyncJob(t, map[string]any{"url": url}))
	hd := <-got
	if err != nil || res.(HTTPResult).Status != http.StatusAccepted || hd.Get(callback.HeaderToken) != "" {
		t.Fatalf("202 to a job that is not async: %v %v, token header %q", res, err, hd.Get(callback.HeaderToken))
	}
}
