package devstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/ferryhq/ferry/platform/redisx"
)

// RedisConfig configures [StartRedis].
type RedisConfig struct {
	// DataDir holds the append-only file. It is created if missing and
	// re-used otherwise. Required.
	DataDir string

	// Port is the TCP port to listen on, on 127.0.0.1. Defaults to a free
	// port (0).
	Port int

	// Databases is the number of logical databases. Defaults to 16, Redis's
	// own default; the test infrastructure uses 4096, one per test.
	Databases int

	// Binary is the redis-server executable. Defaults to redis-server on
	// PATH.
	Binary string

	// Args are extra redis-server arguments, appended after the defaults
	// so that they override them, e.g. "--maxmemory", "1gb".
	Args []string

	// LogFile receives the server's output. Defaults to redis.log inside
	// DataDir.
	LogFile string

	// StartTimeout bounds startup when ctx has no deadline. Defaults to 30s.
	StartTimeout time.Duration
}

// WithDefaults returns a copy of c with its zero fields set to their defaults.
func (c RedisConfig) WithDefaults() RedisConfig {
	if c.Databases == 0 {
		c.Databases = 16
	}
	if c.Binary == "" {
		c.Binary = "redis-server"
	}
	if c.LogFile == "" && c.DataDir != "" {
		c.LogFile = filepath.Join(c.DataDir, "redis.log")
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 30 * time.Second
	}
	return c
}

// Validate reports a configuration StartRedis cannot run.
func (c RedisConfig) Validate() error {
	if c.DataDir == "" {
		return errors.New("devstack: RedisConfig.DataDir is required")
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("devstack: RedisConfig.Port %d out of range", c.Port)
	}
	if c.Databases < 1 {
		return fmt.Errorf("devstack: RedisConfig.Databases %d must be at least 1", c.Databases)
	}
	return nil
}

// StartRedis starts redis-server on 127.0.0.1 with an append-only file in
// cfg.DataDir (appendfsync everysec, no RDB snapshots) and returns once it
// answers PING, with its URL: redis://127.0.0.1:PORT/0.
func StartRedis(ctx context.Context, cfg RedisConfig) (*Process, string, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, "", err
	}
	ctx, cancel := withStartTimeout(ctx, cfg.StartTimeout)
	defer cancel()

	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, "", fmt.Errorf("devstack: redis data dir: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, "", fmt.Errorf("devstack: create redis data dir: %w", err)
	}
	bin, err := exec.LookPath(cfg.Binary)
	if err != nil {
		return nil, "", fmt.Errorf("devstack: %s not found (%w); run scripts/install-deps.sh (Debian: apt-get install redis-server) or set RedisConfig.Binary", cfg.Binary, err)
	}

	for attempt := 1; ; attempt++ {
		port := cfg.Port
		if port == 0 {
			if port, err = FreePort(); err != nil {
				return nil, "", err
			}
		}
		p, url, err := runRedis(ctx, cfg, bin, dataDir, port)
		if errors.Is(err, errPortInUse) && cfg.Port == 0 && attempt < portAttempts {
			continue
		}
		return p, url, err
	}
}

// runRedis starts the server on port and waits until it answers PING.
func runRedis(ctx context.Context, cfg RedisConfig, bin, dataDir string, port int) (*Process, string, error) {
	args := []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--dir", dataDir,
		"--appendonly", "yes",
		"--appendfsync", "everysec",
		"--save", "", // the append-only file is the persistence
		"--databases", strconv.Itoa(cfg.Databases),
		"--daemonize", "no",
		"--logfile", "", // stdout, which goes to LogFile
		"--protected-mode", "yes",
		// Ferry's recommended settings (redisx); the listpack limit by its
		// Redis 6.2 name, which Redis 7 and 8 keep as an alias.
		"--hash-max-ziplist-value", strconv.Itoa(redisx.HashMaxListpackValue),
		"--auto-aof-rewrite-percentage", strconv.Itoa(redisx.AOFRewritePercentage),
	}
	args = append(args, cfg.Args...)
	logOffset := fileSize(cfg.LogFile)
	p, err := startProcess(processSpec{
		name:    "redis",
		path:    bin,
		args:    args,
		dir:     dataDir,
		stopSig: syscall.SIGTERM, // flushes the append-only file and exits
		logPath: cfg.LogFile,
	})
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitRedis(ctx, p, addr, logOffset); err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(stopCtx)
		if strings.Contains(logTail(cfg.LogFile, logOffset), "Address already in use") {
			return nil, "", fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return nil, "", err
	}
	return p, "redis://" + addr + "/0", nil
}

// isOurRedis reports nil when the server at c is process pid, not another
// server that already held the port, and answers PING, which it does not
// while it replays its append-only file (INFO does).
func isOurRedis(ctx context.Context, c *redis.Client, pid int) error {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if v != strconv.Itoa(pid) {
				return fmt.Errorf("port answered by redis process %s", v)
			}
			return c.Ping(ctx).Err()
		}
	}
	return errors.New("INFO server has no process_id")
}

// waitRedis polls until the server is ours and ready.
func waitRedis(ctx context.Context, p *Process, addr string, logOffset int64) error {
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		DialTimeout:     time.Second,
		MaxRetries:      -1,
		DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	})
	defer c.Close()
	var lastErr error
	for {
		select {
		case <-p.Done():
			return p.exitedEarly(logOffset)
		default:
		}
		if lastErr = isOurRedis(ctx, c, p.PID()); lastErr == nil {
			return nil
		}
		select {
		case <-p.Done():
			return p.exitedEarly(logOffset)
		case <-ctx.Done():
			return fmt.Errorf("devstack: redis not ready (%v): %w; log %s:\n%s", lastErr, ctx.Err(), p.LogPath(), logTail(p.LogPath(), logOffset))
		case <-time.After(pollInterval):
		}
	}
}
