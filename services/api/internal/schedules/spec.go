package schedules

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // IANA zones even on hosts and images without a zoneinfo database

	"github.com/robfig/cron/v3"
)

// parser accepts 5 fields (minute precision), 6 fields (a leading seconds
// field), the descriptors (@yearly, @monthly, @weekly, @daily, @hourly) and
// @every <duration>.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// MinEvery is the shortest @every interval (the parser's precision).
const MinEvery = time.Second

// allHours is the hour field of an expression that fires in every hour.
const allHours = 1<<24 - 1

// Spec is a parsed cron expression in a time zone. Its fire times follow
// the rules of docs/schedules.md:
//
//   - @every d fires every d after the schedule's first fire time, on the
//     absolute clock: time zones and DST do not apply.
//   - An expression whose hour field is every hour (*) follows the absolute
//     clock too: in an hour skipped by DST it does not fire (that hour does
//     not exist), in a repeated hour it fires in both passes.
//   - An expression naming hours follows the wall clock: a fire time inside
//     a skipped hour fires once, at the first instant after the gap (02:30
//     on the spring-forward day in Europe/Berlin fires at 03:00 CEST); a
//     fire time inside a repeated hour fires once, in its first pass (02:30
//     on the fall-back day fires at 02:30 CEST, not again at 02:30 CET).
type Spec struct {
	sched cron.Schedule
	loc   *time.Location
	// wall is set for expressions naming hours; utc is the same expression
	// evaluated on naive wall-clock times (represented in UTC).
	wall bool
	utc  *cron.SpecSchedule
}

// ParseTimeZone loads an IANA time zone; "" is UTC. "Local" is refused: a
// schedule must mean the same on every replica.
func ParseTimeZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, errors.New(`"Local" depends on the host; name an IANA time zone such as "Europe/Berlin" or "UTC"`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown IANA time zone %q", name)
	}
	return loc, nil
}

// Parse parses expr for the time zone loc.
func Parse(expr string, loc *time.Location) (Spec, error) {
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return Spec{}, errors.New("set the time zone in the timezone field, not in the expression")
	}
	if rest, ok := strings.CutPrefix(expr, "@every "); ok {
		// The parser rounds sub-second intervals up silently; refuse them.
		if d, err := time.ParseDuration(strings.TrimSpace(rest)); err == nil && (d < MinEvery || d%time.Second != 0) {
			return Spec{}, fmt.Errorf("@every must be a whole number of seconds, at least %s", MinEvery)
		}
	}
	sched, err := parser.Parse(expr)
	if err != nil {
		return Spec{}, err
	}
	s := Spec{sched: sched, loc: loc}
	if c, ok := sched.(*cron.SpecSchedule); ok {
		c.Location = loc
		if c.Hour&allHours != allHours {
			u := *c
			u.Location = time.UTC
			s.wall, s.utc = true, &u
		}
	}
	return s, nil
}

// Location is the schedule's time zone.
func (s Spec) Location() *time.Location { return s.loc }

// Next returns the first fire time after t, or the zero time when there is
// none within five years (an expression such as "0 0 30 2 *").
func (s Spec) Next(t time.Time) time.Time {
	for range 1000 {
		next := s.sched.Next(t)
		if next.IsZero() || !s.wall {
			return next.UTC()
		}
		if g, ok := s.gapFire(t, next); ok {
			return g.UTC()
		}
		if !s.repeated(next) {
			return next.UTC()
		}
		t = next
	}
	return time.Time{}
}

// gapFire is the end of the first forward DST jump in (after, next] whose
// skipped wall-clock times the expression matches: those fire times fire
// once, when the gap ends.
func (s Spec) gapFire(after, next time.Time) (time.Time, bool) {
	_, end := after.In(s.loc).ZoneBounds()
	for !end.IsZero() && !end.After(next) {
		_, offBefore := end.Add(-time.Nanosecond).In(s.loc).Zone()
		_, offAfter := end.In(s.loc).Zone()
		if jump := time.Duration(offAfter-offBefore) * time.Second; jump > 0 && end.After(after) {
			gapEnd := naive(end.In(s.loc))
			if w := s.utc.Next(gapEnd.Add(-jump - time.Second)); !w.IsZero() && w.Before(gapEnd) {
				return end, true
			}
		}
		_, end = end.In(s.loc).ZoneBounds()
	}
	return time.Time{}, false
}

// repeated reports whether t's wall-clock time already occurred before t,
// in the first pass of an hour repeated by a backward DST jump.
func (s Spec) repeated(t time.Time) bool {
	start, _ := t.In(s.loc).ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, offBefore := start.Add(-time.Nanosecond).In(s.loc).Zone()
	_, offAfter := start.In(s.loc).Zone()
	back := time.Duration(offBefore-offAfter) * time.Second
	return back > 0 && t.Sub(start) < back
}

// naive is t's wall-clock reading as a UTC time.
func naive(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// NextN returns the next n fire times after t.
func (s Spec) NextN(t time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for len(out) < n {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}
