package opscmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/redisx"
)

// checkRedisSettings reads redisx.Settings with CONFIG GET. A Redis that
// refuses CONFIG (a managed service, an ACL user without it) passes with a
// note to check by hand; one that may evict fails.
func checkRedisSettings(ctx context.Context, c config.Common) (string, error) {
	cl, err := redisx.Connect(ctx, c.RedisURL, c.Redis)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	got := map[string]string{}
	for _, s := range redisx.Settings {
		v, err := configGet(ctx, cl, s)
		if err != nil {
			return fmt.Sprintf("not readable (CONFIG GET: %v); compare them by hand with docs/operations.md", err), nil
		}
		got[s.Name] = v
	}
	return judgeRedisSettings(got)
}

// configGet reads one setting, by its alias on a Redis that lacks the name.
func configGet(ctx context.Context, cl *redis.Client, s redisx.Setting) (string, error) {
	for _, name := range []string{s.Name, s.Alias} {
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
	for _, s := range redisx.Settings {
		v := got[s.Name]
		if s.Meets(v) {
			parts = append(parts, s.Name+" "+v)
			continue
		}
		if s.Required {
			return "", fmt.Errorf("%s is %q: Redis may evict queue entries, which stalls their jobs until a rebuild; set %s %s (docs/operations.md)",
				s.Name, v, s.Name, s.Want)
		}
		parts = append(parts, fmt.Sprintf("%s %s (recommended %s, docs/operations.md)", s.Name, v, s.Want))
	}
	return strings.Join(parts, ", "), nil
}
