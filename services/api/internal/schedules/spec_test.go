package schedules

import (
	"testing"
	"time"
)

func berlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := ParseTimeZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustParse(t *testing.T, expr string, loc *time.Location) Spec {
	t.Helper()
	s, err := Parse(expr, loc)
	if err != nil {
		t.Fatalf("Parse(%q): %v", expr, err)
	}
	return s
}

func fires(s Spec, from time.Time, n int) []string {
	var out []string
	for _, t := range s.NextN(from, n) {
		out = append(out, t.Format(time.RFC3339))
	}
	return out
}

func eq(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("fires = %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("fires = %v, want %v", got, want)
		}
	}
}

// Spring forward in Europe/Berlin: 2026-03-29 02:00 CET becomes 03:00 CEST
// (01:00 UTC). A daily 02:30 fires once, at the end of the gap.
func TestNextDSTGapFiresOnceAtGapEnd(t *testing.T) {
	s := mustParse(t, "30 2 * * *", berlin(t))
	eq(t, fires(s, time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC), 4),
		"2026-03-28T01:30:00Z", // 02:30 CET
		"2026-03-29T01:00:00Z", // gap: 03:00 CEST
		"2026-03-30T00:30:00Z", // 02:30 CEST
		"2026-03-31T00:30:00Z")
	// Several fire times inside the gap still make one fire.
	s = mustParse(t, "0,15,30,45 2 * * *", berlin(t))
	eq(t, fires(s, time.Date(2026, 3, 29, 0, 50, 0, 0, time.UTC), 2),
		"2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z")
}

// Fall back: 2026-10-25 03:00 CEST becomes 02:00 CET (01:00 UTC), so
// 02:00-02:59 happens twice. A daily 02:30 fires in the first pass only.
func TestNextDSTOverlapFiresOnce(t *testing.T) {
	s := mustParse(t, "30 2 * * *", berlin(t))
	eq(t, fires(s, time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC), 3),
		"2026-10-25T00:30:00Z", // 02:30 CEST, first pass
		"2026-10-26T01:30:00Z", // next day 02:30 CET
		"2026-10-27T01:30:00Z")
}

// An expression firing every hour follows the absolute clock: no fire in
// the skipped hour, both passes of the repeated hour.
func TestNextDSTEveryHourFollowsAbsoluteClock(t *testing.T) {
	s := mustParse(t, "30 * * * *", berlin(t))
	eq(t, fires(s, time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), 3),
		"2026-03-29T00:30:00Z", // 01:30 CET
		"2026-03-29T01:30:00Z", // 03:30 CEST (02:30 does not exist)
		"2026-03-29T02:30:00Z")
	eq(t, fires(s, time.Date(2026, 10, 24, 23, 45, 0, 0, time.UTC), 4),
		"2026-10-25T00:30:00Z", // 02:30 CEST
		"2026-10-25T01:30:00Z", // 02:30 CET
		"2026-10-25T02:30:00Z", // 03:30 CET
		"2026-10-25T03:30:00Z")
}

func TestNextSecondsField(t *testing.T) {
	s := mustParse(t, "*/20 * * * * *", time.UTC)
	eq(t, fires(s, time.Date(2026, 1, 1, 0, 0, 5, 500, time.UTC), 3),
		"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z")
	s = mustParse(t, "0 0 9 * * MON-FRI", berlin(t))
	eq(t, fires(s, time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC), 2), // a Friday
		"2026-01-05T08:00:00Z", "2026-01-06T08:00:00Z")
}

func TestNextEveryIgnoresTimeZones(t *testing.T) {
	s := mustParse(t, "@every 30m", berlin(t))
	eq(t, fires(s, time.Date(2026, 3, 29, 0, 40, 0, 0, time.UTC), 3),
		"2026-03-29T01:10:00Z", "2026-03-29T01:40:00Z", "2026-03-29T02:10:00Z")
	s = mustParse(t, "@every 1s", time.UTC)
	eq(t, fires(s, time.Date(2026, 1, 1, 0, 0, 0, 250_000_000, time.UTC), 2),
		"2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z")
}

func TestNextDescriptors(t *testing.T) {
	s := mustParse(t, "@daily", berlin(t))
	eq(t, fires(s, time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), 1), "2026-06-01T22:00:00Z")
	s = mustParse(t, "@hourly", time.UTC)
	eq(t, fires(s, time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), 1), "2026-06-01T13:00:00Z")
}

func TestParseRejects(t *testing.T) {
	for _, expr := range []string{"", "* * * *", "61 * * * *", "* * * * * * *", "@every 500ms", "@every x",
		"CRON_TZ=Europe/Berlin 0 * * * *", "TZ=UTC 0 * * * *", "@fortnightly"} {
		if _, err := Parse(expr, time.UTC); err == nil {
			t.Errorf("Parse(%q) accepted", expr)
		}
	}
	for _, tz := range []string{"Local", "Mars/Olympus", "../etc/passwd"} {
		if _, err := ParseTimeZone(tz); err == nil {
			t.Errorf("ParseTimeZone(%q) accepted", tz)
		}
	}
	if loc, err := ParseTimeZone(""); err != nil || loc != time.UTC {
		t.Errorf(`ParseTimeZone("") = %v, %v`, loc, err)
	}
}

func TestNextNeverMatches(t *testing.T) {
	s := mustParse(t, "0 0 30 2 *", time.UTC)
	if got := s.Next(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); !got.IsZero() {
		t.Fatalf("Next = %v, want zero", got)
	}
}
