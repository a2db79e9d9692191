package api

import (
	"testing"

	"github.com/ferryhq/ferry/platform/testenv"
)

func TestConfigDefaultsHaveOneSource(t *testing.T) {
	// SecretKeyFile is where `ferry dev` keeps its generated key, under
	// FERRY_DATA_DIR; a Config built in code passes SecretKey instead.
	// ScheduleFiring is a bool: FERRY_SCHEDULES_FIRING defaults to true,
	// a Config built in code (tests) fires only when it says so.
	fromEnv := LoadConfig(testenv.EmptyEnv()).WithDefaults()
	testenv.DefaultsAgree(t, fromEnv, Config{}.WithDefaults(), "SecretKeyFile", "ScheduleFiring")
	if !fromEnv.ScheduleFiring {
		t.Error("FERRY_SCHEDULES_FIRING unset: the replica does not fire schedules")
	}
	if err := fromEnv.Validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}
