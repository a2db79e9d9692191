package testenv

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// redisCounterKey, in the database of FERRY_TEST_REDIS_URL, hands out the
// databases of successive tests.
const redisCounterKey = "ferry:testenv:next-db"

// Redis returns the URL of a Redis database on the server named by
// FERRY_TEST_REDIS_URL that no other running test uses, emptied for the
// calling test and emptied again when it ends. Databases are handed out in
// turn, across processes, from a counter in the URL's own database, which is
// never handed out; the server needs many databases (make test starts it with
// --databases 4096) so that a database comes round again only long after its
// previous test ended.
func Redis(t testing.TB) string {
	t.Helper()
	base := requireEnv(t, RedisURLEnv)
	opts, err := redis.ParseURL(base)
	if err != nil {
		t.Fatalf("testenv: %s=%q: %v", RedisURLEnv, base, err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testenv: %s=%q: %v", RedisURLEnv, base, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := newRedisClient(opts, opts.DB)
	defer admin.Close()
	n, err := admin.Incr(ctx, redisCounterKey).Result()
	if err != nil {
		t.Fatalf("testenv: redis at %s: %v (is the server up? %s)", RedisURLEnv, err, howToRun)
	}
	cfg, err := admin.ConfigGet(ctx, "databases").Result()
	if err != nil {
		t.Fatalf("testenv: redis CONFIG GET databases: %v", err)
	}
	dbs, err := strconv.Atoi(cfg["databases"])
	if err != nil || dbs < 2 {
		t.Fatalf("testenv: the redis server at %s has %q databases; start it with --databases 4096 (%s)", RedisURLEnv, cfg["databases"], howToRun)
	}
	db := int((n - 1) % int64(dbs-1))
	if db >= opts.DB {
		db++ // skip the counter's database
	}

	c := newRedisClient(opts, db)
	if err := c.FlushDB(ctx).Err(); err != nil {
		c.Close()
		t.Fatalf("testenv: redis FLUSHDB %d: %v", db, err)
	}
	t.Cleanup(func() {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.FlushDB(ctx).Err(); err != nil {
			t.Errorf("testenv: redis FLUSHDB %d: %v", db, err)
		}
	})

	u.Path = "/" + strconv.Itoa(db)
	return u.String()
}

// newRedisClient is a client of database db with the connection settings of
// opts.
func newRedisClient(opts *redis.Options, db int) *redis.Client {
	o := *opts
	o.DB = db
	o.PoolSize = 1
	o.DisableIdentity = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClient(&o)
}
