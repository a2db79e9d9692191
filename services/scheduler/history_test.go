package scheduler

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ferryhq/ferry/events/schema"
)

// TestBoundHistory: a job that failed 100 times with 100 KB errors carries
// a history of the first attempt, the first timeout and the last nine, each
// error cut to maxErrorBytes, so its retry and dlq records keep within the
// half of a record the submit limit leaves them.
func TestBoundHistory(t *testing.T) {
	var h []schema.Attempt
	for i := 1; i <= 100; i++ {
		class := schema.ClassAppError
		if i == 5 || i == 6 {
			class = schema.ClassTimeout
		}
		h = append(h, schema.Attempt{Attempt: i, Class: class, Error: strings.Repeat("é", 50_000), WorkerID: "w"})
	}
	got := boundHistory(h)
	var nums []int
	for _, a := range got {
		nums = append(nums, a.Attempt)
		if len(a.Error) > maxErrorBytes || !strings.HasSuffix(a.Error, "[truncated]") {
			t.Fatalf("attempt %d error of %d bytes", a.Attempt, len(a.Error))
		}
	}
	want := []int{1, 5, 92, 93, 94, 95, 96, 97, 98, 99, 100}
	if len(nums) != len(want) {
		t.Fatalf("kept attempts %v, want %v", nums, want)
	}
	for i := range want {
		if nums[i] != want[i] {
			t.Fatalf("kept attempts %v, want %v", nums, want)
		}
	}
	if len(h[0].Error) != 100_000 {
		t.Fatal("boundHistory changed its input")
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > schema.MaxRecordBytes-schema.MaxSubmitRecordBytes-16<<10 {
		t.Fatalf("bounded history is %d bytes", len(b))
	}
	short := []schema.Attempt{{Attempt: 1, Error: "boom"}, {Attempt: 2, Error: "bang"}}
	if got := boundHistory(short); len(got) != 2 || got[0].Error != "boom" || got[1].Error != "bang" {
		t.Fatalf("short history changed: %+v", got)
	}
}
