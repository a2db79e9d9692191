package worker

import (
	"slices"
	"testing"

	"github.com/ferryhq/ferry/platform/config"
)

// FERRY_DEV_WORKER_POOLS picks the built-in worker's pools, or none.
func TestDevPools(t *testing.T) {
	for in, want := range map[string][]string{"": {"short", "long"}, "short": {"short"}, " long , short": {"long", "short"}, "none": nil} {
		got, err := devPools(config.NewLoader(func(string) (string, bool) { return in, true }))
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := devPools(config.NewLoader(func(string) (string, bool) { return "short,huge", true })); err == nil {
		t.Error("an unknown pool was accepted")
	}
}
