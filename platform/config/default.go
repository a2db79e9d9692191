package config

import (
	"fmt"
	"strconv"
	"time"
)

// Default sets *field to value when it holds its zero value: the one line
// every Config.WithDefaults repeats for each field that no environment
// variable sets.
func Default[T comparable](field *T, value T) {
	var zero T
	if *field == zero {
		*field = value
	}
}

// DefaultVar sets *field, when it holds its zero value, to the default that
// [Vars] declares for the environment variable name: a setting read from the
// environment has its default in that one table, and WithDefaults (for
// callers that build a Config in code) takes it from there instead of
// repeating it. It panics when name is not declared or its default does not
// parse as the field's type — a programming error every test of the
// service's WithDefaults catches.
func DefaultVar[T int | int64 | string | time.Duration](field *T, name string) {
	var zero T
	if *field != zero {
		return
	}
	v, ok := Lookup(name)
	if !ok {
		panic("config: DefaultVar of undeclared variable " + name)
	}
	var parsed any
	var err error
	switch any(zero).(type) {
	case int:
		parsed, err = strconv.Atoi(v.Default)
	case int64:
		parsed, err = strconv.ParseInt(v.Default, 10, 64)
	case string:
		parsed = v.Default
	case time.Duration:
		parsed, err = time.ParseDuration(v.Default)
	}
	if err != nil {
		panic(fmt.Sprintf("config: default of %s (%q): %v", name, v.Default, err))
	}
	*field = parsed.(T)
}
