package scheduler

import (
	"testing"

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
