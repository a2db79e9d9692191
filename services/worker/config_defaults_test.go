package worker_test

import (
	"testing"

	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/worker"
)

func TestConfigDefaultsHaveOneSource(t *testing.T) {
	// SecretKeyFile is where `ferry dev` keeps its generated key, under
	// FERRY_DATA_DIR; a Config built in code passes SecretKey instead.
	fromEnv := worker.LoadConfig(testenv.EmptyEnv()).WithDefaults()
	testenv.DefaultsAgree(t, fromEnv, worker.Config{}.WithDefaults(), "SecretKeyFile")
	if err := fromEnv.Validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}
