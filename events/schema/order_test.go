package schema

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// advancesTable says, for every pair of event types, whether an event of the
// column type moves a job forward from the position an event of the row type
// put it in ("Y") or is ignored ("."), for the three relations between the
// attempts. Rows and columns are in EventTypes order: enqueued, started,
// progress, completed, failed, dlq, cancelled.
var advancesTable = map[string][]string{
	// next.Attempt == cur.Attempt: the phase decides.
	"same attempt": {
		//          enq sta pro com fai dlq can   (next)
		/* enq */ ". Y Y Y Y Y Y",
		/* sta */ ". . . Y Y Y Y",
		/* pro */ ". . . Y Y Y Y",
		/* com */ ". . . . . . .",
		/* fai */ ". . . Y . Y Y",
		/* dlq */ ". . . Y . . .",
		/* can */ ". . . Y . Y .",
	},
	// next.Attempt == cur.Attempt+1: a later attempt moves any non-terminal
	// position forward; from a terminal one only a higher terminal phase, or
	// the same terminal phase of the later attempt, does.
	"later attempt": {
		/* enq */ "Y Y Y Y Y Y Y",
		/* sta */ "Y Y Y Y Y Y Y",
		/* pro */ "Y Y Y Y Y Y Y",
		/* com */ ". . . Y . . .",
		/* fai */ "Y Y Y Y Y Y Y",
		/* dlq */ ". . . Y . Y .",
		/* can */ ". . . Y . Y Y",
	},
	// next.Attempt == cur.Attempt-1: a stale attempt never moves a job
	// forward, except a terminal event that outranks the current phase.
	"earlier attempt": {
		/* enq */ ". . . Y . Y Y",
		/* sta */ ". . . Y . Y Y",
		/* pro */ ". . . Y . Y Y",
		/* com */ ". . . . . . .",
		/* fai */ ". . . Y . Y Y",
		/* dlq */ ". . . Y . . .",
		/* can */ ". . . Y . Y .",
	},
}

func TestAdvancesTable(t *testing.T) {
	deltas := map[string]int{"same attempt": 0, "later attempt": 1, "earlier attempt": -1}
	if len(EventTypes) != 7 {
		t.Fatalf("the table covers 7 event types, there are %d: extend it", len(EventTypes))
	}
	for name, rows := range advancesTable {
		for i, cur := range EventTypes {
			cols := strings.Fields(rows[i])
			for j, next := range EventTypes {
				for _, attempt := range []int{2, 3, 7} {
					c := PositionOf(cur, attempt)
					n := PositionOf(next, attempt+deltas[name])
					want := cols[j] == "Y"
					if got := n.Advances(c); got != want {
						t.Errorf("%s: %s#%d after %s#%d: Advances = %v, want %v", name, next, n.Attempt, cur, c.Attempt, got, want)
					}
				}
			}
		}
	}
}

// TestAdvancesIsAStrictTotalOrder checks Advances over every position the
// events can produce: never reflexive, never both ways, transitive, and
// total between distinct positions. That is what makes the final position
// independent of arrival order.
func TestAdvancesIsAStrictTotalOrder(t *testing.T) {
	var ps []Position
	seen := map[Position]bool{}
	for _, et := range EventTypes {
		for a := 1; a <= 4; a++ {
			if p := PositionOf(et, a); !seen[p] {
				seen[p] = true
				ps = append(ps, p)
			}
		}
	}
	for _, p := range ps {
		if p.Advances(p) {
			t.Errorf("%v advances itself: repeats would be applied", p)
		}
		for _, q := range ps {
			if p == q {
				continue
			}
			if p.Advances(q) == q.Advances(p) {
				t.Errorf("%v vs %v: Advances both ways or neither (%v)", p, q, p.Advances(q))
			}
			for _, r := range ps {
				if r.Advances(q) && q.Advances(p) && !r.Advances(p) {
					t.Errorf("not transitive: %v > %v > %v but not %v > %v", r, q, p, r, p)
				}
			}
		}
	}
}

func TestPositionOfZeroStart(t *testing.T) {
	// A job the projection has not seen yet is at the zero position; any
	// event moves it forward.
	for _, et := range EventTypes {
		if !PositionOf(et, 1).Advances(Position{}) {
			t.Errorf("%s#1 does not advance a new job", et)
		}
	}
}

type step struct {
	et      EventType
	attempt int
}

func (s step) String() string { return fmt.Sprintf("%s#%d", s.et, s.attempt) }

// apply folds events into a position the way a projection does.
func apply(steps []step) Position {
	var cur Position
	for _, s := range steps {
		if next := PositionOf(s.et, s.attempt); next.Advances(cur) {
			cur = next
		}
	}
	return cur
}

// permute calls fn with every permutation of s (Heap's algorithm).
func permute(s []step, fn func([]step)) {
	s = append([]step(nil), s...)
	var gen func(k int)
	gen = func(k int) {
		if k <= 1 {
			fn(s)
			return
		}
		for i := 0; i < k; i++ {
			gen(k - 1)
			if k%2 == 0 {
				s[i], s[k-1] = s[k-1], s[i]
			} else {
				s[0], s[k-1] = s[k-1], s[0]
			}
		}
	}
	gen(len(s))
}

// TestAnyOrderReachesTheSameFinalPosition applies every permutation of the
// event sequences of realistic job histories, races included.
func TestAnyOrderReachesTheSameFinalPosition(t *testing.T) {
	for _, tc := range []struct {
		name   string
		steps  []step
		want   Position
		status Status
	}{
		{"succeeds first time", []step{
			{EventEnqueued, 1}, {EventStarted, 1}, {EventProgress, 1}, {EventProgress, 1}, {EventCompleted, 1},
		}, Position{1, PhaseSucceeded}, StatusSucceeded},
		{"retried then succeeds", []step{
			{EventEnqueued, 1}, {EventStarted, 1}, {EventFailed, 1}, {EventEnqueued, 2}, {EventStarted, 2}, {EventProgress, 2}, {EventCompleted, 2},
		}, Position{2, PhaseSucceeded}, StatusSucceeded},
		{"retries exhausted", []step{
			{EventEnqueued, 1}, {EventStarted, 1}, {EventFailed, 1}, {EventEnqueued, 2}, {EventStarted, 2}, {EventFailed, 2}, {EventDLQ, 2},
		}, Position{2, PhaseDead}, StatusDead},
		{"waiting for a retry", []step{
			{EventEnqueued, 1}, {EventStarted, 1}, {EventFailed, 1}, {EventEnqueued, 2},
		}, Position{2, PhaseEnqueued}, StatusQueued}, // scheduled while its run_at is ahead (Status(true))
		{"failed, decision pending", []step{
			{EventEnqueued, 1}, {EventStarted, 1}, {EventProgress, 1}, {EventFailed, 1},
		}, Position{1, PhaseFailed}, StatusScheduled},
		{"worker lost, re-dispatched on the same attempt", []step{
			{EventEnqueued, 1}, {EventStarted, 1}, {EventProgress, 1}, {EventStarted, 1}, {EventProgress, 1},
		}, Position{1, PhaseRunning}, StatusRunning},
		{"cancelled while queued", []step{
			{EventEnqueued, 1}, {EventCancelled, 1},
		}, Position{1, PhaseCancelled}, StatusCancelled},
		{"cancel races a completion", []step{
			{EventEnqueued, 1}, {EventStarted, 1}, {EventCancelled, 1}, {EventProgress, 1}, {EventCompleted, 1},
		}, Position{1, PhaseSucceeded}, StatusSucceeded},
		{"cancel races the dead-letter decision", []step{
			{EventEnqueued, 1}, {EventStarted, 1}, {EventFailed, 1}, {EventCancelled, 1}, {EventDLQ, 1},
		}, Position{1, PhaseDead}, StatusDead},
		{"cancelled during a retry", []step{
			{EventEnqueued, 1}, {EventStarted, 1}, {EventFailed, 1}, {EventEnqueued, 2}, {EventStarted, 2}, {EventCancelled, 2}, {EventFailed, 2},
		}, Position{2, PhaseCancelled}, StatusCancelled},
		{"expired before it ran", []step{
			{EventEnqueued, 1}, {EventDLQ, 1},
		}, Position{1, PhaseDead}, StatusDead},
		{"duplicate deliveries", []step{
			{EventEnqueued, 1}, {EventEnqueued, 1}, {EventStarted, 1}, {EventStarted, 1}, {EventCompleted, 1}, {EventCompleted, 1},
		}, Position{1, PhaseSucceeded}, StatusSucceeded},
		{"two terminal events of one phase on different attempts", []step{
			{EventEnqueued, 1}, {EventCancelled, 1}, {EventEnqueued, 2}, {EventCancelled, 2},
		}, Position{2, PhaseCancelled}, StatusCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := apply(tc.steps); got != tc.want {
				t.Fatalf("in order: %+v, want %+v", got, tc.want)
			}
			if got := tc.want.Status(false); got != tc.status {
				t.Errorf("Status = %s, want %s", got, tc.status)
			}
			n := 0
			permute(tc.steps, func(order []step) {
				n++
				if got := apply(order); got != tc.want {
					t.Fatalf("order %v reaches %+v, want %+v", order, got, tc.want)
				}
			})
			if want := factorial(len(tc.steps)); n != want {
				t.Fatalf("tried %d orders, want %d", n, want)
			}
		})
	}
}

func factorial(n int) int {
	if n <= 1 {
		return 1
	}
	return n * factorial(n-1)
}

// TestAnyOrderRandomHistories folds random multisets of events, including
// ones no real job produces, in random orders: the result must not depend
// on the order.
func TestAnyOrderRandomHistories(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		steps := make([]step, 1+rng.IntN(8))
		for i := range steps {
			steps[i] = step{EventTypes[rng.IntN(len(EventTypes))], 1 + rng.IntN(3)}
		}
		want := apply(steps)
		for range 20 {
			order := append([]step(nil), steps...)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			if got := apply(order); got != want {
				t.Fatalf("%v reaches %+v, but %v reaches %+v", steps, want, order, got)
			}
		}
	}
}

func TestPositionOf(t *testing.T) {
	want := map[EventType]Phase{
		EventEnqueued: PhaseEnqueued, EventStarted: PhaseRunning, EventProgress: PhaseRunning,
		EventFailed: PhaseFailed, EventCancelled: PhaseCancelled, EventDLQ: PhaseDead, EventCompleted: PhaseSucceeded,
	}
	for _, et := range EventTypes {
		if got := PositionOf(et, 4); got != (Position{4, want[et]}) {
			t.Errorf("PositionOf(%s, 4) = %+v, want phase %d", et, got, want[et])
		}
	}
}

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		phase    Phase
		delayed  bool
		want     Status
		terminal bool
	}{
		{PhaseEnqueued, false, StatusQueued, false},
		{PhaseEnqueued, true, StatusScheduled, false},
		{PhaseRunning, false, StatusRunning, false},
		{PhaseRunning, true, StatusRunning, false},
		{PhaseFailed, false, StatusScheduled, false},
		{PhaseCancelled, false, StatusCancelled, true},
		{PhaseDead, false, StatusDead, true},
		{PhaseSucceeded, true, StatusSucceeded, true},
	} {
		got := Position{Attempt: 1, Phase: tc.phase}.Status(tc.delayed)
		if got != tc.want {
			t.Errorf("phase %d delayed %v: Status = %s, want %s", tc.phase, tc.delayed, got, tc.want)
		}
		if got.Terminal() != tc.terminal || tc.phase.Terminal() != tc.terminal {
			t.Errorf("phase %d: Terminal = %v/%v, want %v", tc.phase, got.Terminal(), tc.phase.Terminal(), tc.terminal)
		}
	}
}
