package testenv_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/testenv"
)

func TestPostgresGivesEachTestItsOwnDatabase(t *testing.T) {
	ctx := context.Background()
	var first string
	ok := t.Run("inner/with spaces & symbols", func(t *testing.T) {
		first = testenv.Postgres(t)
		second := testenv.Postgres(t)
		if first == second {
			t.Fatalf("two calls returned the same database %s", first)
		}
		conn, err := pgx.Connect(ctx, first)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var db string
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(db, "t_testpostgresgiveseachtestitsowndatabase_inner") || len(db) > 63 {
			t.Fatalf("database name %q", db)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE jobs (id int)"); err != nil {
			t.Fatal(err)
		}
		// The connection stays open: cleanup must drop the database anyway.
	})
	if !ok {
		return
	}

	conn, err := pgx.Connect(ctx, os.Getenv(testenv.PostgresURLEnv))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cfg, err := pgx.ParseConfig(first)
	if err != nil {
		t.Fatal(err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", cfg.Database).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatalf("database %s was not dropped after its test", cfg.Database)
	}
}

func TestPostgresParallel(t *testing.T) {
	for i := range 8 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			url := testenv.Postgres(t)
			conn, err := pgx.Connect(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			conn.Close(context.Background())
		})
	}
}

func TestRedisGivesEachTestItsOwnDatabase(t *testing.T) {
	ctx := context.Background()
	var firstURL string
	ok := t.Run("inner", func(t *testing.T) {
		firstURL = testenv.Redis(t)
		secondURL := testenv.Redis(t)
		if firstURL == secondURL {
			t.Fatalf("two calls returned the same database %s", firstURL)
		}
		a, b := client(t, firstURL), client(t, secondURL)
		if err := a.Set(ctx, "k", "a", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := b.Exists(ctx, "k").Result(); err != nil || n != 0 {
			t.Fatalf("key leaked into the other database: %d, %v", n, err)
		}
	})
	if !ok {
		return
	}
	if n, err := client(t, firstURL).DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("database not emptied after its test: %d keys, %v", n, err)
	}
}

func client(t *testing.T, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestKafkaRoundTrip(t *testing.T) {
	brokers := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	for i := range 3 {
		r := &kgo.Record{Topic: "ferry.jobs.enqueued", Key: []byte("job-1"), Value: fmt.Appendf(nil, "v%d", i)}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers),
		kgo.ConsumerGroup("testenv"),
		kgo.ConsumeTopics("ferry.jobs.enqueued"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var got []string
	for len(got) < 3 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %v: %v", got, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if strings.Join(got, ",") != "v0,v1,v2" {
		t.Fatalf("consumed %v", got)
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
}

// fatalRecorder is a testing.TB whose Fatal ends the calling goroutine and
// records the message, so a helper's failure can be inspected.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Skip(...any)                  { r.msg = "skipped"; runtime.Goexit() }
func (r *fatalRecorder) Skipf(string, ...any)         { r.msg = "skipped"; runtime.Goexit() }
func (r *fatalRecorder) SkipNow()                     { r.msg = "skipped"; runtime.Goexit() }
func (r *fatalRecorder) Cleanup(func())               {}
func (r *fatalRecorder) Errorf(f string, args ...any) { r.msg = fmt.Sprintf(f, args...) }

func TestMissingEnvironmentFailsWithInstructions(t *testing.T) {
	for _, tc := range []struct {
		env    string
		helper func(testing.TB) string
	}{
		{testenv.PostgresURLEnv, testenv.Postgres},
		{testenv.RedisURLEnv, testenv.Redis},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, "")
			r := &fatalRecorder{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				tc.helper(r)
				r.msg = "returned without failing"
			}()
			<-done
			for _, want := range []string{tc.env + " is not set", "make test", testenv.PostgresURLEnv, testenv.RedisURLEnv} {
				if !strings.Contains(r.msg, want) {
					t.Errorf("failure %q does not mention %q", r.msg, want)
				}
			}
		})
	}
}
