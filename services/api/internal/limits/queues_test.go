package limits

import (
	"context"
	"testing"
	"time"
)

// TestQueuesCheck: names admitted by this replica count before the
// projection sees them, names already live or repeated count once, and an
// admitted name stops counting once it is neither live nor recent.
func TestQueuesCheck(t *testing.T) {
	ctx := context.Background()
	live := map[string]bool{"a": true, "idle": false}
	now := time.Unix(1000, 0)
	q := NewQueues(time.Second, time.Minute, func(context.Context, string) (map[string]bool, error) {
		out := map[string]bool{}
		for k, v := range live {
			out[k] = v
		}
		return out, nil
	})
	q.setClock(func() time.Time { return now })
	fresh, total, err := q.Check(ctx, "t", []string{"a", "b", "b", "c"})
	if err != nil || len(fresh) != 2 || total != 3 {
		t.Fatalf("fresh %v total %d %v", fresh, total, err)
	}
	q.Note("t", fresh)
	// Not projected yet, cache reloaded: b and c still count.
	now = now.Add(2 * time.Second)
	if fresh, total, _ := q.Check(ctx, "t", []string{"d"}); len(fresh) != 1 || total != 4 {
		t.Fatalf("recent names not counted: fresh %v total %d", fresh, total)
	}
	// Projected: b is live, counted once.
	live["b"] = true
	now = now.Add(2 * time.Second)
	if _, total, _ := q.Check(ctx, "t", []string{"b"}); total != 3 {
		t.Fatalf("live and recent b counted twice: total %d", total)
	}
	// b and c finished; the projection knows both: they count no more,
	// without waiting for the hold.
	live["b"], live["c"] = false, false
	now = now.Add(2 * time.Second)
	if fresh, total, _ := q.Check(ctx, "t", []string{"e"}); len(fresh) != 1 || total != 2 {
		t.Fatalf("after b and c finished: fresh %v total %d, want [e] 2", fresh, total)
	}
	// An idle queue the projection knows is a new name again.
	if fresh, _, _ := q.Check(ctx, "t", []string{"idle"}); len(fresh) != 1 {
		t.Fatalf("idle queue: fresh %v", fresh)
	}
}
