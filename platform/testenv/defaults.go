package testenv

import (
	"reflect"
	"slices"
	"testing"

	"github.com/ferryhq/ferry/platform/config"
)

// EmptyEnv is a config.Loader over an environment that sets nothing, so
// every variable reads its declared default.
func EmptyEnv() *config.Loader {
	return config.NewLoader(func(string) (string, bool) { return "", false })
}

// DefaultsAgree fails t unless fromEnv (LoadConfig over [EmptyEnv], then
// WithDefaults) and inCode (the zero Config's WithDefaults) are equal: a
// setting has one default whichever way a Config is built, the one
// platform/config.Vars declares (which compose's configdoc test holds
// docs/configuration.md to). Func fields (clocks, hooks) and unexported
// fields are not compared, nor the fields named in notInCode: settings
// LoadConfig computes from other variables (a path under FERRY_DATA_DIR),
// and bools whose zero value is a choice of the code that builds a Config
// (a bool has no "unset"). Both must be structs of the same type.
func DefaultsAgree(t testing.TB, fromEnv, inCode any, notInCode ...string) {
	t.Helper()
	a, b := reflect.ValueOf(&fromEnv).Elem().Elem(), reflect.ValueOf(&inCode).Elem().Elem()
	if a.Type() != b.Type() || a.Kind() != reflect.Struct {
		t.Fatalf("DefaultsAgree: want two structs of one type, got %s and %s", a.Type(), b.Type())
	}
	for i := range a.NumField() {
		f := a.Type().Field(i)
		if f.Type.Kind() == reflect.Func || !f.IsExported() || slices.Contains(notInCode, f.Name) {
			continue
		}
		if x, y := a.Field(i).Interface(), b.Field(i).Interface(); !reflect.DeepEqual(x, y) {
			t.Errorf("%s.%s: default from the environment %v, in code %v", a.Type(), f.Name, x, y)
		}
	}
}
