package jobs

import (
	"strings"
	"testing"
	"time"
)

// TestIDs: minted ids are job_ + UUIDv7 of now; a derived id is the same
// for the same key and time, differs for another key, and carries its
// time; an id without a time counts as old.
func TestIDs(t *testing.T) {
	before := time.Now().Add(-time.Second)
	id := NewID()
	if !strings.HasPrefix(id, "job_") || MintedBefore(id, before) || !MintedBefore(id, time.Now().Add(time.Second)) {
		t.Fatalf("minted %s", id)
	}
	at := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	a, b, c := DerivedID("sch_1@x", at), DerivedID("sch_1@x", at), DerivedID("sch_2@x", at)
	if a != b || a == c || !strings.HasPrefix(a, "job_") {
		t.Fatalf("derived %s %s %s", a, b, c)
	}
	if MintedBefore(a, at) || !MintedBefore(a, at.Add(time.Millisecond)) {
		t.Fatalf("derived id %s does not carry %s", a, at)
	}
	if !MintedBefore("job_r1", at) {
		t.Fatal("an id without a time is not old")
	}
}
