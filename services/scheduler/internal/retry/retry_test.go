package retry

import (
	"testing"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

func fixed(r float64) func() float64 { return func() float64 { return r } }

func TestBackoffExponentialAndCapped(t *testing.T) {
	p := Policy{Jitter: -1}
	cases := []struct {
		n    int
		want time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{10, 512 * time.Second}, {11, 10 * time.Minute}, {63, 10 * time.Minute}, {1000, 10 * time.Minute},
	}
	for _, c := range cases {
		if got := p.Backoff(c.n, nil); got != c.want {
			t.Errorf("Backoff(%d) = %v, want %v", c.n, got, c.want)
		}
	}
}

func TestBackoffOverride(t *testing.T) {
	p := Policy{Jitter: -1}
	o := &schema.Backoff{Base: schema.Duration(100 * time.Millisecond), Max: schema.Duration(time.Second)}
	if got := p.Backoff(3, o); got != 400*time.Millisecond {
		t.Errorf("got %v", got)
	}
	if got := p.Backoff(5, o); got != time.Second {
		t.Errorf("capped: got %v", got)
	}
	// Only max overridden, smaller than base: max wins.
	if got := p.Backoff(1, &schema.Backoff{Max: schema.Duration(10 * time.Millisecond)}); got != 10*time.Millisecond {
		t.Errorf("max below base: got %v", got)
	}
}

func TestBackoffJitterBounds(t *testing.T) {
	for _, r := range []float64{0, 0.25, 0.5, 0.999999} {
		p := Policy{Rand: fixed(r)}
		for n := 1; n <= 20; n++ {
			nominal := Policy{Jitter: -1}.Backoff(n, nil)
			got := p.Backoff(n, nil)
			lo, hi := time.Duration(float64(nominal)*0.75), time.Duration(float64(nominal)*1.25)
			if got < lo || got > hi {
				t.Fatalf("r=%v n=%d: %v outside [%v, %v]", r, n, got, lo, hi)
			}
		}
	}
	if got := (Policy{Rand: fixed(0)}).Backoff(1, nil); got != 750*time.Millisecond {
		t.Errorf("r=0: got %v, want 750ms", got)
	}
	if got := (Policy{Rand: fixed(0.5)}).Backoff(1, nil); got != time.Second {
		t.Errorf("r=0.5: got %v, want 1s", got)
	}
	if got := (Policy{Rand: fixed(0.5), Jitter: 0.1}).Backoff(2, nil); got != 2*time.Second {
		t.Errorf("custom jitter midpoint: got %v", got)
	}
	if got := (Policy{Rand: fixed(0), Jitter: 0.1}).Backoff(2, nil); got != 1800*time.Millisecond {
		t.Errorf("custom jitter low: got %v", got)
	}
}

func TestBackoffDefaultRandStaysInBounds(t *testing.T) {
	var p Policy
	for range 1000 {
		got := p.Backoff(1, nil)
		if got < 750*time.Millisecond || got >= 1250*time.Millisecond {
			t.Fatalf("got %v", got)
		}
	}
}

func TestDecideClasses(t *testing.T) {
	p := Policy{Rand: fixed(0.5)}
	job := schema.JobSpec{MaxAttempts: 3}
	cases := []struct {
		name   string
		in     Input
		action Action
		delay  time.Duration
	}{
		{"app_error first", Input{Job: job, Attempt: 1, Class: schema.ClassAppError}, Retry, time.Second},
		{"app_error second", Input{Job: job, Attempt: 2, Class: schema.ClassAppError}, Retry, 2 * time.Second},
		{"app_error exhausted", Input{Job: job, Attempt: 3, Class: schema.ClassAppError}, DeadLetter, 0},
		{"default max attempts", Input{Job: schema.JobSpec{}, Attempt: 4, Class: schema.ClassAppError}, Retry, 8 * time.Second},
		{"default max attempts exhausted", Input{Job: schema.JobSpec{}, Attempt: 5, Class: schema.ClassAppError}, DeadLetter, 0},
		{"retryable hint above backoff", Input{Job: job, Attempt: 1, Class: schema.ClassRetryable, RetryAfter: 30 * time.Second}, Retry, 30 * time.Second},
		{"retryable hint below backoff", Input{Job: job, Attempt: 2, Class: schema.ClassRetryable, RetryAfter: 10 * time.Millisecond}, Retry, 2 * time.Second},
		{"retryable no hint", Input{Job: job, Attempt: 1, Class: schema.ClassRetryable}, Retry, time.Second},
		{"retryable exhausted", Input{Job: job, Attempt: 3, Class: schema.ClassRetryable, RetryAfter: time.Second}, DeadLetter, 0},
		{"permanent", Input{Job: job, Attempt: 1, Class: schema.ClassPermanent}, DeadLetter, 0},
		{"expired", Input{Job: job, Attempt: 1, Class: schema.ClassExpired}, DeadLetter, 0},
		{"unknown class", Input{Job: job, Attempt: 1, Class: "weird"}, DeadLetter, 0},
		{"timeout once", Input{Job: job, Attempt: 1, Class: schema.ClassTimeout}, Retry, time.Second},
		{"timeout after app_error", Input{Job: job, Attempt: 2, Class: schema.ClassTimeout,
			History: []schema.Attempt{{Attempt: 1, Class: schema.ClassAppError}}}, Retry, 2 * time.Second},
		{"timeout twice", Input{Job: job, Attempt: 2, Class: schema.ClassTimeout,
			History: []schema.Attempt{{Attempt: 1, Class: schema.ClassTimeout}}}, DeadLetter, 0},
		{"timeout exhausted", Input{Job: schema.JobSpec{MaxAttempts: 1}, Attempt: 1, Class: schema.ClassTimeout}, DeadLetter, 0},
		{"worker_lost", Input{Job: job, Attempt: 3, Class: schema.ClassWorkerLost}, Redispatch, 0},
		{"cancelled", Input{Job: job, Attempt: 1, Class: schema.ClassCancelled}, Nothing, 0},
		{"override backoff", Input{Job: schema.JobSpec{MaxAttempts: 5, Backoff: &schema.Backoff{Base: schema.Duration(time.Millisecond)}},
			Attempt: 3, Class: schema.ClassAppError}, Retry, 4 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Decide(c.in)
			if d.Action != c.action || d.Delay != c.delay {
				t.Fatalf("got %v after %v (%s), want %v after %v", d.Action, d.Delay, d.Why, c.action, c.delay)
			}
			if d.Action == DeadLetter && d.Class != c.in.Class {
				t.Fatalf("dead-letter class %q, want %q", d.Class, c.in.Class)
			}
		})
	}
}

func TestTypeBackoff(t *testing.T) {
	p := Policy{Base: time.Second, Max: time.Minute, Jitter: -1, Types: map[string]TypeBackoff{"slow": {Base: 10 * time.Second, Max: 30 * time.Second}}}
	in := Input{Job: schema.JobSpec{Type: "slow", MaxAttempts: 9}, Attempt: 2, Class: schema.ClassAppError}
	if d := p.Decide(in); d.Action != Retry || d.Delay != 20*time.Second {
		t.Fatalf("type backoff: %+v", d)
	}
	in.Attempt = 3
	if d := p.Decide(in); d.Delay != 30*time.Second {
		t.Fatalf("type max: %+v", d)
	}
	in.Job.Backoff = &schema.Backoff{Base: schema.Duration(100 * time.Millisecond)}
	if d := p.Decide(in); d.Delay != 400*time.Millisecond {
		t.Fatalf("job overrides type: %+v", d)
	}
	in.Job = schema.JobSpec{Type: "other", MaxAttempts: 9}
	if d := p.Decide(in); d.Delay != 4*time.Second {
		t.Fatalf("other type: %+v", d)
	}
}

// TestBackoffJobJitter: a job's own jitter replaces the default spread, and
// 0 makes every delay exact (the benchmark's constant 1 s retry).
func TestBackoffJobJitter(t *testing.T) {
	zero, tenth := 0.0, 0.1
	for _, r := range []float64{0, 0.5, 0.999} {
		p := Policy{Rand: func() float64 { return r }}
		exact := &schema.Backoff{Base: schema.Duration(time.Second), Max: schema.Duration(time.Second), Jitter: &zero}
		if d := p.Backoff(1, exact); d != time.Second {
			t.Fatalf("jitter 0, rand %v: %v, want exactly 1s", r, d)
		}
		narrow := &schema.Backoff{Base: schema.Duration(time.Second), Jitter: &tenth}
		if d := p.Backoff(1, narrow); d < 900*time.Millisecond || d > 1100*time.Millisecond {
			t.Fatalf("jitter 0.1, rand %v: %v, want within ±10%% of 1s", r, d)
		}
	}
	p := Policy{Rand: func() float64 { return 0.999 }}
	if d := p.Backoff(1, &schema.Backoff{Base: schema.Duration(time.Second)}); d < 1200*time.Millisecond {
		t.Fatalf("no job jitter: %v, want the default ±25%% spread", d)
	}
}
