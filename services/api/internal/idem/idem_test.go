package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api/internal/idem"
)

func store(t *testing.T, claimTTL time.Duration) (*idem.Store, *redis.Client) {
	t.Helper()
	opts, err := redis.ParseURL(testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return idem.New(rdb, 24*time.Hour, claimTTL), rdb
}

func claim(t *testing.T, s *idem.Store, c idem.Claim) idem.Result {
	t.Helper()
	res, err := s.Claim(context.Background(), "acme", []idem.Claim{c})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// TestClaimIsALease is issue 11 item 5: a claim whose request died blocks
// retries only for the claim TTL, not the 24h of a finished key, and the
// retry that takes it over gets the dead request's job id.
func TestClaimIsALease(t *testing.T) {
	s, rdb := store(t, 300*time.Millisecond)
	ctx := context.Background()
	if r := claim(t, s, idem.Claim{Key: "k", Hash: "h1", JobID: "job_a"}); r.Outcome != idem.Claimed || r.JobID != "job_a" {
		t.Fatalf("first claim: %+v", r)
	}
	if ttl := rdb.PTTL(ctx, idem.Key("acme", "k")).Val(); ttl <= 0 || ttl > 300*time.Millisecond {
		t.Fatalf("in-flight claim lives %v, want at most the claim TTL", ttl)
	}
	if r := claim(t, s, idem.Claim{Key: "k", Hash: "h1", JobID: "job_b"}); r.Outcome != idem.InFlight {
		t.Fatalf("while held: %+v, want InFlight", r)
	}
	if r := claim(t, s, idem.Claim{Key: "k", Hash: "h2", JobID: "job_c"}); r.Outcome != idem.Reused {
		t.Fatalf("other body while held: %+v, want Reused", r)
	}
	time.Sleep(400 * time.Millisecond) // the request died; its lease runs out
	if r := claim(t, s, idem.Claim{Key: "k", Hash: "h2", JobID: "job_c"}); r.Outcome != idem.Reused {
		t.Fatalf("other body after the lease: %+v, want Reused (the dead request's job may exist)", r)
	}
	r := claim(t, s, idem.Claim{Key: "k", Hash: "h1", JobID: "job_d"})
	if r.Outcome != idem.Claimed || r.JobID != "job_a" {
		t.Fatalf("retry after the lease: %+v, want Claimed with the dead request's job_a", r)
	}
	// Completed: the 24h record replaces claim and intent.
	if err := s.Complete(ctx, "acme", []idem.Finished{{Key: "k", Hash: "h1", JobID: "job_a"}}); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, idem.Key("acme", "k")).Val(); ttl < 23*time.Hour {
		t.Fatalf("finished key lives %v, want the idempotency TTL", ttl)
	}
	if n := rdb.Exists(ctx, idem.IntentKey("acme", "k")).Val(); n != 0 {
		t.Fatal("intent kept after completion")
	}
	if r := claim(t, s, idem.Claim{Key: "k", Hash: "h1", JobID: "job_e"}); r.Outcome != idem.Done || r.JobID != "job_a" {
		t.Fatalf("after completion: %+v, want Done job_a", r)
	}
}

// TestReleaseAndAbandon: a claim refused before its produce is freed for
// any body; one whose produce failed (it may have reached Kafka) is free
// at once for the same body, with the same job id.
func TestReleaseAndAbandon(t *testing.T) {
	s, _ := store(t, time.Hour)
	ctx := context.Background()
	c := idem.Claim{Key: "rel", Hash: "h1", JobID: "job_a"}
	claim(t, s, c)
	if err := s.Release(ctx, "acme", []idem.Claim{c}); err != nil {
		t.Fatal(err)
	}
	if r := claim(t, s, idem.Claim{Key: "rel", Hash: "h2", JobID: "job_b"}); r.Outcome != idem.Claimed || r.JobID != "job_b" {
		t.Fatalf("after release, another body: %+v", r)
	}

	c = idem.Claim{Key: "ab", Hash: "h1", JobID: "job_x"}
	claim(t, s, c)
	if err := s.Abandon(ctx, "acme", []idem.Claim{c}); err != nil {
		t.Fatal(err)
	}
	if r := claim(t, s, idem.Claim{Key: "ab", Hash: "h2", JobID: "job_y"}); r.Outcome != idem.Reused {
		t.Fatalf("after abandon, another body: %+v, want Reused", r)
	}
	if r := claim(t, s, idem.Claim{Key: "ab", Hash: "h1", JobID: "job_z"}); r.Outcome != idem.Claimed || r.JobID != "job_x" {
		t.Fatalf("after abandon, same body: %+v, want Claimed job_x", r)
	}
	// Release only frees this request's own claim.
	if err := s.Release(ctx, "acme", []idem.Claim{{Key: "ab", Hash: "h1", JobID: "job_other"}}); err != nil {
		t.Fatal(err)
	}
	if r := claim(t, s, idem.Claim{Key: "ab", Hash: "h1", JobID: "job_w"}); r.Outcome != idem.InFlight {
		t.Fatalf("a foreign release freed the claim: %+v", r)
	}
}
