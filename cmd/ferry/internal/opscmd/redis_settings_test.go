package opscmd

import (
	"strings"
	"testing"
)

// TestJudgeRedisSettings: an evicting Redis fails; the other settings are
// listed with the recommended value where they fall short, and pass.
func TestJudgeRedisSettings(t *testing.T) {
	good := map[string]string{"maxmemory-policy": "noeviction", "appendonly": "yes",
		"hash-max-listpack-value": "8192", "auto-aof-rewrite-percentage": "400"}
	detail, err := judgeRedisSettings(good)
	if err != nil || strings.Contains(detail, "recommended") {
		t.Fatalf("recommended settings: %q, %v", detail, err)
	}

	defaults := map[string]string{"maxmemory-policy": "noeviction", "appendonly": "no",
		"hash-max-listpack-value": "64", "auto-aof-rewrite-percentage": "100"}
	detail, err = judgeRedisSettings(defaults)
	if err != nil {
		t.Fatalf("Redis's defaults: %v", err)
	}
	for _, want := range []string{"appendonly no (recommended yes", "hash-max-listpack-value 64 (recommended 4096",
		"auto-aof-rewrite-percentage 100 (recommended 400"} {
		if !strings.Contains(detail, want) {
			t.Errorf("Redis's defaults: no %q in %q", want, detail)
		}
	}

	evicting := map[string]string{"maxmemory-policy": "allkeys-lru", "appendonly": "yes",
		"hash-max-listpack-value": "4096", "auto-aof-rewrite-percentage": "400"}
	if _, err := judgeRedisSettings(evicting); err == nil || !strings.Contains(err.Error(), "set maxmemory-policy noeviction") {
		t.Fatalf("evicting Redis: err = %v, want one that says to set noeviction", err)
	}
}
