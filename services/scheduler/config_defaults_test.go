package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/ferryhq/ferry/platform/config"
	"github.com/ferryhq/ferry/platform/testenv"
)

func TestConfigDefaultsHaveOneSource(t *testing.T) {
	fromEnv, err := LoadConfig(testenv.EmptyEnv())
	if err != nil {
		t.Fatal(err)
	}
	testenv.DefaultsAgree(t, fromEnv.WithDefaults(), Config{}.WithDefaults())
	if got := (Config{}).WithDefaults().Prefetch; got != 16 {
		t.Errorf("Config{}.WithDefaults().Prefetch = %d, want the documented 16", got)
	}
}

// TestPrefetchZeroMeansNone: FERRY_SCHEDULER_PREFETCH=0 dispatches nothing
// beyond the free slots, and stays so however often WithDefaults runs
// (Build and New both apply it).
func TestPrefetchZeroMeansNone(t *testing.T) {
	l := config.NewLoader(func(k string) (string, bool) {
		return map[string]string{"FERRY_SCHEDULER_PREFETCH": "0"}[k], k == "FERRY_SCHEDULER_PREFETCH"
	})
	cfg, err := LoadConfig(l)
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithDefaults().WithDefaults()
	if cfg.Prefetch != NoPrefetch || cfg.basePrefetch() != 0 {
		t.Fatalf("Prefetch = %d (base %d), want NoPrefetch (0 beyond the free slots)", cfg.Prefetch, cfg.basePrefetch())
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestLookaheadZeroMeansNone: FERRY_SCHEDULER_LOOKAHEAD=0 leases nothing
// ahead (the default does not come back), and a look-ahead not shorter
// than the lease is refused, naming the variable.
func TestLookaheadZeroMeansNone(t *testing.T) {
	load := func(v string) Config {
		t.Helper()
		l := config.NewLoader(func(k string) (string, bool) {
			return v, k == "FERRY_SCHEDULER_LOOKAHEAD"
		})
		cfg, err := LoadConfig(l)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.WithDefaults().WithDefaults()
	}
	if cfg := load("0"); cfg.Lookahead != NoLookahead || cfg.Validate() != nil {
		t.Fatalf("Lookahead = %v (%v), want NoLookahead and valid", cfg.Lookahead, cfg.Validate())
	}
	if cfg := (Config{}).WithDefaults(); cfg.Lookahead <= 0 {
		t.Fatalf("default Lookahead = %v, want the documented look-ahead", cfg.Lookahead)
	}
	err := load("1m").Validate()
	if err == nil || !strings.Contains(err.Error(), "FERRY_SCHEDULER_LOOKAHEAD") {
		t.Fatalf("a look-ahead past the lease: %v, want an error naming FERRY_SCHEDULER_LOOKAHEAD", err)
	}
}

// TestDefaultLookaheadStaysBelowTheLease: with a lease no longer than the
// default look-ahead and no look-ahead set, the default is cut to half the
// lease instead of refusing to start; one set explicitly is still refused.
func TestDefaultLookaheadStaysBelowTheLease(t *testing.T) {
	env := map[string]string{"FERRY_SCHEDULER_LEASE": "2s"}
	load := func() Config {
		t.Helper()
		cfg, err := LoadConfig(config.NewLoader(func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.WithDefaults()
	}
	if cfg := load(); cfg.Lookahead != time.Second || cfg.Validate() != nil {
		t.Fatalf("lease 2s: Lookahead = %v (%v), want 1s and valid", cfg.Lookahead, cfg.Validate())
	}
	env["FERRY_SCHEDULER_LOOKAHEAD"] = "2s"
	if err := load().Validate(); err == nil || !strings.Contains(err.Error(), "FERRY_SCHEDULER_LOOKAHEAD") {
		t.Fatalf("an explicit look-ahead of the lease: %v, want an error naming FERRY_SCHEDULER_LOOKAHEAD", err)
	}
}
