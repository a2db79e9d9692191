package schema

import "sync/atomic"

// CodecCounts are how many records this process encoded and decoded, since
// it started: full decodes (Decode: the CloudEvents attributes and the
// JSON data), header-only decodes (DecodeMeta) and encodes (NewRecord).
// The platform exposes them as metrics; the bench divides them by the jobs
// of a run, which is the JSON line of the per-job budget
// (docs/performance.md).
type CodecCounts struct {
	Decodes, MetaDecodes, Encodes int64
}

// codec holds the counts; an atomic add is a few nanoseconds beside a
// decode's microseconds.
var codec struct {
	decodes, metaDecodes, encodes atomic.Int64
}

// Counts returns the process's codec counts so far.
func Counts() CodecCounts {
	return CodecCounts{Decodes: codec.decodes.Load(), MetaDecodes: codec.metaDecodes.Load(), Encodes: codec.encodes.Load()}
}
