package schedules

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func at(sec int) *time.Time { t := t0.Add(time.Duration(sec) * time.Second); return &t }

func secs(ts []time.Time) []int {
	out := []int{}
	for _, t := range ts {
		out = append(out, int(t.Sub(t0)/time.Second))
	}
	return out
}

func TestDecideCatchUp(t *testing.T) {
	every := mustParse(t, "@every 10s", time.UTC)
	now := t0.Add(65 * time.Second) // fires at 0..60 passed: 7 of them
	for _, tc := range []struct {
		catchup string
		limit   int
		now     time.Time
		fire    []int
		skipped int
	}{
		{CatchupSkip, 0, now, []int{}, 7},                                             // 60 is 5s late: beyond the grace
		{CatchupSkip, 0, t0.Add(60*time.Second + 500*time.Millisecond), []int{60}, 6}, // on time
		{CatchupOne, 0, now, []int{60}, 6},
		{CatchupAll, 3, now, []int{40, 50, 60}, 4},
		{CatchupAll, 10, now, []int{0, 10, 20, 30, 40, 50, 60}, 0},
	} {
		p := Decide(every, State{Overlap: OverlapAllow, Catchup: tc.catchup, CatchupLimit: tc.limit, NextFire: at(0)}, tc.now, time.Second)
		if got := secs(p.Fire); !sameInts(got, tc.fire) {
			t.Errorf("%s/%d: fire %v, want %v", tc.catchup, tc.limit, got, tc.fire)
		}
		if p.Skipped != tc.skipped {
			t.Errorf("%s/%d: skipped %d, want %d", tc.catchup, tc.limit, p.Skipped, tc.skipped)
		}
		if p.Next == nil || !p.Next.Equal(*at(70)) {
			t.Errorf("%s: next %v, want +70s", tc.catchup, p.Next)
		}
	}
}

func TestDecideNotDue(t *testing.T) {
	every := mustParse(t, "@every 10s", time.UTC)
	p := Decide(every, State{Overlap: OverlapSkip, Catchup: CatchupOne, NextFire: at(10)}, t0, time.Second)
	if len(p.Fire) != 0 || p.Skipped != 0 || p.Queue != nil || !p.Next.Equal(*at(10)) {
		t.Fatalf("plan %+v", p)
	}
}

func TestDecideOverlap(t *testing.T) {
	every := mustParse(t, "@every 10s", time.UTC)
	base := State{Catchup: CatchupAll, CatchupLimit: 10, NextFire: at(0)}
	now := t0.Add(25 * time.Second) // 0, 10, 20 passed
	for _, tc := range []struct {
		name    string
		overlap string
		active  bool
		queued  *time.Time
		fire    []int
		queue   *time.Time
		skipped int
	}{
		{"allow", OverlapAllow, true, nil, []int{0, 10, 20}, nil, 0},
		{"skip active", OverlapSkip, true, nil, []int{}, nil, 3},
		{"skip idle", OverlapSkip, false, nil, []int{0}, nil, 2},
		{"queue_one active", OverlapQueueOne, true, nil, []int{}, at(0), 2},
		{"queue_one active, one queued", OverlapQueueOne, true, at(-10), []int{}, at(-10), 3},
		{"queue_one idle", OverlapQueueOne, false, nil, []int{0}, at(10), 1},
		{"queue_one idle, one queued", OverlapQueueOne, false, at(-10), []int{-10}, at(0), 2},
	} {
		st := base
		st.Overlap, st.PrevActive, st.QueuedFire = tc.overlap, tc.active, tc.queued
		p := Decide(every, st, now, time.Second)
		got := secs(p.Fire)
		if !sameInts(got, tc.fire) {
			t.Errorf("%s: fire %v, want %v", tc.name, got, tc.fire)
		}
		if (p.Queue == nil) != (tc.queue == nil) || (p.Queue != nil && !p.Queue.Equal(*tc.queue)) {
			t.Errorf("%s: queue %v, want %v", tc.name, p.Queue, tc.queue)
		}
		if p.Skipped != tc.skipped {
			t.Errorf("%s: skipped %d, want %d", tc.name, p.Skipped, tc.skipped)
		}
	}
	// A queued fire alone (no new fire time) fires once the run finished.
	p := Decide(every, State{Overlap: OverlapQueueOne, Catchup: CatchupOne, NextFire: at(30), QueuedFire: at(20)}, now, time.Second)
	if got := secs(p.Fire); len(got) != 1 || got[0] != 20 || p.Queue != nil {
		t.Fatalf("queued fire: %+v", p)
	}
}

func TestDecideBoundsEnumeration(t *testing.T) {
	every := mustParse(t, "@every 1s", time.UTC)
	now := t0.Add(48 * time.Hour)
	p := Decide(every, State{Overlap: OverlapAllow, Catchup: CatchupOne, NextFire: at(0)}, now, time.Second)
	if len(p.Fire) != 1 || p.Skipped != maxEnumerate-1 || p.Next == nil || !p.Next.After(now) {
		t.Fatalf("plan: fire %v skipped %d next %v", p.Fire, p.Skipped, p.Next)
	}
}

func sameInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
