package telemetry

import "sync"

// MaxLabelValues bounds the distinct values a client-chosen metric label
// (queue names, job types) takes over a process's life: OpenTelemetry keeps
// every series of a cumulative instrument, so a tenant submitting a new name
// per job would otherwise grow every scrape and the process's memory
// without bound.
const MaxLabelValues = 1000

// OverflowLabel is the label value of names past the bound.
const OverflowLabel = "_other"

// LabelValues hands out the values of one metric label, at most max distinct
// ones; later names share OverflowLabel. Safe for concurrent use.
type LabelValues struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

// NewLabelValues returns a label bounded to max distinct values.
func NewLabelValues(max int) *LabelValues { return &LabelValues{max: max} }

// Value is v while v is among the first max values seen, else OverflowLabel.
func (l *LabelValues) Value(v string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[v]; ok {
		return v
	}
	if len(l.seen) >= l.max {
		return OverflowLabel
	}
	if l.seen == nil {
		l.seen = map[string]struct{}{}
	}
	l.seen[v] = struct{}{}
	return v
}
