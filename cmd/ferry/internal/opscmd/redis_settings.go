package opscmd

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/devstack"
	"github.com/ferryhq/ferry/platform/redisx"
)

// redisSetting is a Redis setting docs/operations.md recommends: the value
// (or, when atLeast, the least value) and whether a Redis without it is
// unfit for Ferry (required) or only costs more CPU.
type redisSetting struct {
	name, alias string // alias: the Redis 6.2 name of a setting Redis 7 renamed
	want        string
	atLeast     bool
	required    bool
}

// redisSettings are what `ferry doctor` reads: an evicting Redis drops
// queue entries, which stalls their jobs until a rebuild; the others are
// Ferry's dev and compose values, each worth ~10-15 % of Redis's CPU per
// job (docs/performance.md, Round 11), and AOF spares a rebuild from the
// log after a restart.
var redisSettings = []redisSetting{
	{name: "maxmemory-policy", want: "noeviction", required: true},
	{name: "appendonly", want: "yes"},
	{name: "hash-max-listpack-value", alias: "hash-max-ziplist-value", want: strconv.Itoa(devstack.RedisHashMaxListpackValue), atLeast: true},
	{name: "auto-aof-rewrite-percentage", want: strconv.Itoa(devstack.RedisAOFRewritePercentage), atLeast: true},
}

// checkRedisSettings reads redisSettings with CONFIG GET. A Redis that
// refuses CONFIG (a managed service, an ACL user without it) passes with a
// note to check by hand; one that may evict fails.
func checkRedisSettings(ctx context.Context, c config.Common) (string, error) {
	cl, err := redisx.Connect(ctx, c.RedisURL, c.Redis)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	got := map[string]string{}
	for _, s := range redisSettings {
		v, err := configGet(ctx, cl, s)
		if err != nil {
			return fmt.Sprintf("not readable (CONFIG GET: %v); compare them by hand with docs/operations.md", err), nil
		}
		got[s.name] = v
	}
	return judgeRedisSettings(got)
}

// configGet reads one setting, by its alias on a Redis that lacks the name.
func configGet(ctx context.Context, cl *redis.Client, s redisSetting) (string, error) {
	for _, name := range []string{s.name, s.alias} {
		if name == "" {
			continue
		}
		m, err := cl.ConfigGet(ctx, name).Result()
		if err != nil {
			return "", err
		}
		if v, ok := m[name]; ok {
			return v, nil
		}
	}
	return "", nil
}

// judgeRedisSettings lists every setting with its value and, where it
// differs, the recommended one; an unmet required setting is the error.
func judgeRedisSettings(got map[string]string) (string, error) {
	var parts []string
	for _, s := range redisSettings {
		v := got[s.name]
		if s.meets(v) {
			parts = append(parts, s.name+" "+v)
			continue
		}
		if s.required {
			return "", fmt.Errorf("%s is %q: Redis may evict queue entries, which stalls their jobs until a rebuild; set %s %s (docs/operations.md)",
				s.name, v, s.name, s.want)
		}
		parts = append(parts, fmt.Sprintf("%s %s (recommended %s, docs/operations.md)", s.name, v, s.want))
	}
	return strings.Join(parts, ", "), nil
}

// meets reports whether v is the recommended value (or, atLeast, no less).
func (s redisSetting) meets(v string) bool {
	if !s.atLeast {
		return v == s.want
	}
	n, err1 := strconv.Atoi(v)
	want, err2 := strconv.Atoi(s.want)
	return err1 == nil && err2 == nil && n >= want
}
