package config

import (
	"testing"
	"time"
)

func TestDefaultVar(t *testing.T) {
	var d time.Duration
	DefaultVar(&d, "FERRY_SHUTDOWN_TIMEOUT")
	if d != 30*time.Second {
		t.Fatalf("duration default = %v, want 30s", d)
	}
	n := 0
	DefaultVar(&n, "FERRY_POSTGRES_MAX_CONNS")
	if n != 16 {
		t.Fatalf("int default = %d, want 16", n)
	}
	s := ""
	DefaultVar(&s, "FERRY_TOPIC_PREFIX")
	if s != "ferry." {
		t.Fatalf("string default = %q", s)
	}
	set := 7
	DefaultVar(&set, "FERRY_POSTGRES_MAX_CONNS")
	if set != 7 {
		t.Fatalf("a set field was overwritten: %d", set)
	}
	for name, f := range map[string]func(){
		"undeclared": func() { var x int; DefaultVar(&x, "FERRY_NOT_A_VARIABLE") },
		"unparsable": func() { var x int; DefaultVar(&x, "FERRY_TOPIC_PREFIX") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: DefaultVar did not panic", name)
				}
			}()
			f()
		}()
	}
}
