package callback_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/callback"
	"github.com/ferryhq/ferry/platform/secretbox"
	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
)

func box(t *testing.T, b byte) *secretbox.Box {
	t.Helper()
	x, err := secretbox.New(bytes.Repeat([]byte{b}, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

var now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func claims(job string, attempt int, dispatch string) callback.Claims {
	return callback.Claims{TenantID: "t1", JobID: job, Attempt: attempt, DispatchID: dispatch, Lease: 90 * time.Second, Expires: now.Add(time.Hour)}
}

// TestTokenBindsItsClaims: a token opens to exactly what was minted, only
// with the same key, unaltered and before its expiry.
func TestTokenBindsItsClaims(t *testing.T) {
	k := box(t, 1)
	c := claims("job_sealed_1", 2, "d-7")
	// Identifiers long enough that random base64 cannot spell them by chance
	// (a two-letter one turns up in about one token in 30).
	c.TenantID = "tenant-sealed"
	tok := callback.Mint(k, c)
	if !strings.HasPrefix(tok, "fcb_") || strings.Contains(tok, c.JobID) || strings.Contains(tok, c.TenantID) {
		t.Fatalf("token %q: want fcb_ and sealed claims", tok)
	}
	got, err := callback.Open(k, tok, now)
	if err != nil || got != c {
		t.Fatalf("open: %+v %v, want %+v", got, err, c)
	}
	if _, err := callback.Open(k, tok, c.Expires); !errors.Is(err, callback.ErrExpiredToken) {
		t.Fatalf("at expiry: %v", err)
	}
	if _, err := callback.Open(box(t, 2), tok, now); !errors.Is(err, callback.ErrInvalidToken) {
		t.Fatalf("another key: %v", err)
	}
	flipped := []byte(tok)
	flipped[len(flipped)-5] ^= 1
	for _, bad := range []string{string(flipped), tok[:len(tok)-2], strings.TrimPrefix(tok, "fcb_"), "", "fcb_%%%", "Bearer " + tok} {
		if _, err := callback.Open(k, bad, now); !errors.Is(err, callback.ErrInvalidToken) {
			t.Errorf("open %q: %v, want invalid", bad, err)
		}
	}
	// Two tokens of the same claims differ (fresh nonce) and both open.
	if again := callback.Mint(k, c); again == tok {
		t.Error("two mints gave the same token")
	}
}

// TestAttemptsFence: only the dispatch that holds the job may report; one
// outcome wins; a repeat of it is a Repeat; a later attempt or dispatch, or
// the worker settling, supersedes; an unclaimed outcome may be claimed again.
func TestAttemptsFence(t *testing.T) {
	deps := testenv.Deps(t, service.Needs{Postgres: true})
	ctx := context.Background()
	if err := callback.Migrate(ctx, deps.Postgres); err != nil {
		t.Fatal(err)
	}
	a := callback.NewAttempts(deps.Postgres)
	must := func(v callback.Verdict, err error) callback.Verdict {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	hold := func(c callback.Claims) bool {
		t.Helper()
		ok, err := a.Hold(ctx, c, now)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	d1 := claims("j", 1, "d1")
	if v := must(a.Check(ctx, d1)); v != callback.Superseded {
		t.Fatalf("report before any hold: %v", v)
	}
	if !hold(d1) {
		t.Fatal("first hold refused")
	}
	if v := must(a.Check(ctx, d1)); v != callback.Apply {
		t.Fatalf("heartbeat of the holder: %v", v)
	}
	other := d1
	other.TenantID = "t2"
	if v := must(a.Check(ctx, other)); v != callback.Superseded {
		t.Fatalf("another tenant's claims: %v", v)
	}

	// The lease ran out: dispatch d2 of the same attempt holds it now.
	d2 := claims("j", 1, "d2")
	if !hold(d2) {
		t.Fatal("re-dispatch refused")
	}
	if v := must(a.Claim(ctx, d1, callback.StateCompleted, now)); v != callback.Superseded {
		t.Fatalf("late complete of the lost dispatch: %v", v)
	}
	if v := must(a.Claim(ctx, d2, callback.StateFailed, now)); v != callback.Apply {
		t.Fatalf("fail of the holder: %v", v)
	}
	if v := must(a.Claim(ctx, d2, callback.StateFailed, now)); v != callback.Repeat {
		t.Fatalf("the same fail again: %v", v)
	}
	if v := must(a.Claim(ctx, d2, callback.StateCompleted, now)); v != callback.Superseded {
		t.Fatalf("complete after fail: %v", v)
	}
	if v := must(a.Check(ctx, d2)); v != callback.Superseded {
		t.Fatalf("heartbeat after fail: %v", v)
	}

	// The retry: attempt 2. A stale dispatch of attempt 1 cannot hold it back.
	a2 := claims("j", 2, "d3")
	if !hold(a2) || hold(claims("j", 1, "d9")) {
		t.Fatal("attempt 2 must hold, a stale attempt 1 must not")
	}
	if v := must(a.Claim(ctx, d2, callback.StateFailed, now)); v != callback.Repeat {
		t.Fatalf("attempt 1's fail repeated after attempt 2 started: %v", v)
	}
	if v := must(a.Claim(ctx, d2, callback.StateCompleted, now)); v != callback.Superseded {
		t.Fatalf("attempt 1's complete after attempt 2 started: %v", v)
	}
	if v := must(a.Claim(ctx, a2, callback.StateCompleted, now)); v != callback.Apply {
		t.Fatalf("attempt 2's complete: %v", v)
	}
	if err := a.Unclaim(ctx, a2, callback.StateCompleted); err != nil {
		t.Fatal(err)
	}
	if v := must(a.Claim(ctx, a2, callback.StateCompleted, now)); v != callback.Apply {
		t.Fatalf("complete after an unclaim: %v", v)
	}

	// The worker settles a dispatch whose receiver did not answer 202.
	s := claims("k", 1, "e1")
	hold(s)
	if err := a.Settle(ctx, s, now); err != nil {
		t.Fatal(err)
	}
	if v := must(a.Claim(ctx, s, callback.StateCompleted, now)); v != callback.Superseded {
		t.Fatalf("complete after the worker settled: %v", v)
	}

	if n, err := a.Prune(ctx, now.Add(time.Second)); err != nil || n != 3 {
		t.Fatalf("prune: %d %v, want 3 rows", n, err)
	}
}

func TestJobURL(t *testing.T) {
	if got := callback.JobURL("https://ferry.example/", "job_1"); got != "https://ferry.example/v1/jobs/job_1/callback" {
		t.Fatal(got)
	}
}
