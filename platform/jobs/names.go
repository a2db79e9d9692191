package jobs

import (
	"regexp"

	"github.com/ferryhq/ferry/events/schema"
)

// Defaults a submission takes for the fields it leaves out, and the bounds
// of priority and attempts.
const (
	DefaultQueue    = "default"
	DefaultPriority = 5
	// MinPriority is the most urgent priority, MaxPriority the least.
	MinPriority = 0
	MaxPriority = 9
	// DefaultMaxAttempts is the attempt budget of a job that sets none and
	// whose type has no default of its own (Limits.MaxAttemptsByType).
	DefaultMaxAttempts = 5
	// MaxMaxAttempts bounds an attempt budget, submitted or edited on
	// re-drive.
	MaxMaxAttempts = 100
)

var (
	typePattern           = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.:/-]{0,127}$`)
	queuePattern          = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
	concurrencyKeyPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:@/+=-]{0,127}$`)
)

// What a bad name is told.
const (
	typeRule        = "must start with a letter and hold at most 128 letters, digits, '_', '.', ':', '/' or '-'"
	queueRule       = "must hold 1 to 64 lower-case letters, digits, '_', '.' or '-', starting with a letter or digit"
	concurrencyRule = "must hold 1 to 128 letters, digits, '_', '.', ':', '@', '/', '+', '=' or '-', starting with a letter or digit"
)

// ValidType reports whether name may be a job type.
func ValidType(name string) bool { return typePattern.MatchString(name) }

// ValidQueue reports whether name may be a queue's name.
func ValidQueue(name string) bool { return queuePattern.MatchString(name) }

// ValidConcurrencyKey reports whether key may be a concurrency key, in a
// submission or in the scheduler's GET /v1/concurrency/{key}.
func ValidConcurrencyKey(key string) bool { return concurrencyKeyPattern.MatchString(key) }

// ValidPriority reports whether p is a priority, MinPriority to MaxPriority.
func ValidPriority(p int) bool { return p >= MinPriority && p <= MaxPriority }

// ValidMaxAttempts reports whether n is an attempt budget, 1 to
// MaxMaxAttempts.
func ValidMaxAttempts(n int) bool { return n >= 1 && n <= MaxMaxAttempts }

// QueueOf returns the queue of a job: its Queue, or DefaultQueue.
func QueueOf(spec schema.JobSpec) string {
	if spec.Queue == "" {
		return DefaultQueue
	}
	return spec.Queue
}

// PoolOf returns the pool a job runs in: its Pool, or short.
func PoolOf(spec schema.JobSpec) string {
	if spec.Pool == "" {
		return schema.PoolShort
	}
	return spec.Pool
}
