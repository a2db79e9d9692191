package redisx

import "strconv"

// HashMaxListpackValue is the hash-max-listpack-value Ferry recommends
// (docs/operations.md) and runs its own Redis with (ferry dev, compose): a
// job's hash holds its spec, which is over Redis's default of 64 bytes for
// nearly every job, and one value over the limit turns the whole hash into
// a hash table (an allocation per field, a dict lookup per read). Kept as
// one listpack up to 4 KiB values, a job costs Redis ~15 % less CPU at full
// load (docs/performance.md, Round 11).
const HashMaxListpackValue = 4096

// AOFRewritePercentage is the auto-aof-rewrite-percentage Ferry recommends
// and runs its own Redis with: a rewrite costs about one serialization of
// the whole dataset and runs each time the append-only file grew by this
// percentage of its size after the last one, so at Redis's default of 100
// it cost ~10 % of Redis's CPU per job (a 100k throughput run: 2 rewrites
// and 165 µs per job, 1 and 149 at 400), for an append-only file of up to
// five times the dataset.
const AOFRewritePercentage = 400

// Setting is a Redis server setting docs/operations.md recommends: the
// value (or, when AtLeast, the least value), and whether a Redis without it
// is unfit for Ferry (Required) or only costs more.
type Setting struct {
	Name     string
	Alias    string // the Redis 6.2 name of a setting Redis 7 renamed, "" if none
	Want     string
	AtLeast  bool
	Required bool
}

// Settings are the settings `ferry doctor` reads: an evicting Redis drops
// queue entries, which stalls their jobs until a rebuild; AOF spares a
// rebuild from the log after a restart; the last two are CPU per job.
var Settings = []Setting{
	{Name: "maxmemory-policy", Want: "noeviction", Required: true},
	{Name: "appendonly", Want: "yes"},
	{Name: "hash-max-listpack-value", Alias: "hash-max-ziplist-value", Want: strconv.Itoa(HashMaxListpackValue), AtLeast: true},
	{Name: "auto-aof-rewrite-percentage", Want: strconv.Itoa(AOFRewritePercentage), AtLeast: true},
}

// Meets reports whether v is the recommended value (or, AtLeast, no less).
func (s Setting) Meets(v string) bool {
	if !s.AtLeast {
		return v == s.Want
	}
	n, err1 := strconv.Atoi(v)
	want, err2 := strconv.Atoi(s.Want)
	return err1 == nil && err2 == nil && n >= want
}
