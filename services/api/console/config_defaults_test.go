package console

import (
	"testing"

	"github.com/ferryhq/ferry/platform/testenv"
)

func TestConfigDefaultsHaveOneSource(t *testing.T) {
	testenv.DefaultsAgree(t, LoadConfig(testenv.EmptyEnv()).WithDefaults(), Config{}.WithDefaults())
}
