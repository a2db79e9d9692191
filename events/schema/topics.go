package schema

import "strings"

// DefaultTopicPrefix is the prefix of every Ferry topic unless configured.
const DefaultTopicPrefix = "ferry."

// Pools a job may run in. Each pool has its own dispatch topic so long jobs
// never hold the slots of short ones.
const (
	PoolShort = "short"
	PoolLong  = "long"
)

// Pools lists every worker pool.
var Pools = []string{PoolShort, PoolLong}

// Topics names Ferry's topics under a prefix. The zero value uses
// DefaultTopicPrefix.
type Topics struct {
	Prefix string
}

func (t Topics) prefix() string {
	if t.Prefix == "" {
		return DefaultTopicPrefix
	}
	return t.Prefix
}

// Lifecycle is the topic of one lifecycle event type, e.g. ferry.jobs.completed.
func (t Topics) Lifecycle(et EventType) string { return t.prefix() + "jobs." + string(et) }

// Dispatch is the command topic the scheduler uses to hand jobs to a pool.
func (t Topics) Dispatch(pool string) string { return t.prefix() + "jobs.dispatch." + pool }

// Workers is the topic on which workers announce their free slots
// (flow control) and hand back jobs on shutdown.
func (t Topics) Workers() string { return t.prefix() + "workers" }

// LifecycleTopics lists the topic of every lifecycle event type.
func (t Topics) LifecycleTopics() []string {
	out := make([]string, 0, len(EventTypes))
	for _, et := range EventTypes {
		out = append(out, t.Lifecycle(et))
	}
	return out
}

// DispatchTopics lists the dispatch topic of every pool.
func (t Topics) DispatchTopics() []string {
	out := make([]string, 0, len(Pools))
	for _, p := range Pools {
		out = append(out, t.Dispatch(p))
	}
	return out
}

// All lists every topic Ferry uses.
func (t Topics) All() []string {
	out := append(t.LifecycleTopics(), t.DispatchTopics()...)
	return append(out, t.Workers(), t.Breakers(), t.Changes())
}

// EventTypeOf returns the lifecycle event type a topic carries, if any.
func (t Topics) EventTypeOf(topic string) (EventType, bool) {
	rest, ok := strings.CutPrefix(topic, t.prefix()+"jobs.")
	if !ok {
		return "", false
	}
	et := EventType(rest)
	return et, et.Valid()
}
