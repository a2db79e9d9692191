package audit_test

import (
	"testing"

	"github.com/ferryhq/ferry/platform/testenv"
	"github.com/ferryhq/ferry/services/audit"
)

func TestConfigDefaultsHaveOneSource(t *testing.T) {
	fromEnv := audit.LoadConfig(testenv.EmptyEnv()).WithDefaults()
	testenv.DefaultsAgree(t, fromEnv, audit.Config{}.WithDefaults())
	if err := fromEnv.Validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}
