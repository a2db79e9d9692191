package webhooks

import (
	"testing"

	"github.com/ferryhq/ferry/platform/testenv"
)

func TestConfigDefaultsHaveOneSource(t *testing.T) {
	// SecretKeyFile is where `ferry dev` keeps its generated key, under
	// FERRY_DATA_DIR; a Config built in code passes SecretKey instead.
	testenv.DefaultsAgree(t, LoadConfig(testenv.EmptyEnv()).WithDefaults(), Config{}.WithDefaults(), "SecretKeyFile")
}
