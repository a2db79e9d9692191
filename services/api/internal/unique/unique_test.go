package unique_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/platform/service"
	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/api/internal/unique"
)

func client(t *testing.T) *redis.Client {
	return testenv.Deps(t, service.Needs{Redis: true}).Redis
}

// TestClaimLifecycle: a free key is claimed in flight, others see the
// holder in flight, then produced; a stale claim is replaced only against
// the value seen; a release frees only this request's claim.
func TestClaimLifecycle(t *testing.T) {
	ctx, rdb := context.Background(), client(t)
	s := unique.New(rdb, 10*time.Second)
	now := time.Now()
	claim := func(c unique.Claim) unique.Result {
		t.Helper()
		res, err := s.Claim(ctx, "acme", []unique.Claim{c})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	if r := claim(unique.Claim{Key: "k", JobID: "job_a"}); !r.Claimed {
		t.Fatalf("free key: %+v", r)
	}
	if r := claim(unique.Claim{Key: "k", JobID: "job_b"}); r.Claimed || !r.InFlight || r.JobID != "job_a" {
		t.Fatalf("key in flight: %+v", r)
	}
	if ttl := rdb.PTTL(ctx, unique.Key("acme", "k")).Val(); ttl <= 0 || ttl > 10*time.Second {
		t.Fatalf("in-flight claim lease %v, want ≤ 10s", ttl)
	}
	if err := s.Settle(ctx, "acme", []unique.Swap{{Key: "k", From: unique.Pending("job_a"), To: unique.Produced("job_a"), Until: now.Add(time.Hour)}}, now); err != nil {
		t.Fatal(err)
	}
	r := claim(unique.Claim{Key: "k", JobID: "job_b"})
	if r.Claimed || r.InFlight || r.JobID != "job_a" || r.Value != "j:job_a" {
		t.Fatalf("produced key: %+v", r)
	}
	if ttl := rdb.PTTL(ctx, unique.Key("acme", "k")).Val(); ttl < 59*time.Minute {
		t.Fatalf("produced claim expires in %v, want the key's hour", ttl)
	}
	// Replacing needs the exact stale value: of two replicas only one wins.
	if r := claim(unique.Claim{Key: "k", JobID: "job_b", Replace: "j:job_x"}); r.Claimed {
		t.Fatalf("replaced against a wrong value: %+v", r)
	}
	if r := claim(unique.Claim{Key: "k", JobID: "job_b", Replace: "j:job_a"}); !r.Claimed {
		t.Fatalf("stale claim not replaced: %+v", r)
	}
	if r := claim(unique.Claim{Key: "k", JobID: "job_c", Replace: "j:job_a"}); r.Claimed || r.JobID != "job_b" {
		t.Fatalf("second replacement of the same stale claim: %+v", r)
	}
	// A release frees only a claim still this request's.
	if err := s.Settle(ctx, "acme", []unique.Swap{{Key: "k", From: unique.Pending("job_c")}}, now); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, unique.Key("acme", "k")).Val(); v != "p:job_b" {
		t.Fatalf("another request's release freed the claim: %q", v)
	}
	if err := s.Settle(ctx, "acme", []unique.Swap{{Key: "k", From: unique.Pending("job_b")}}, now); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, unique.Key("acme", "k")).Val(); n != 0 {
		t.Fatal("release left the claim")
	}
	// Keys are per tenant.
	if r := claim(unique.Claim{Key: "k", JobID: "job_d"}); !r.Claimed {
		t.Fatalf("after release: %+v", r)
	}
	if res, _ := s.Claim(ctx, "globex", []unique.Claim{{Key: "k", JobID: "job_e"}}); !res[0].Claimed {
		t.Fatalf("other tenant: %+v", res[0])
	}
}
