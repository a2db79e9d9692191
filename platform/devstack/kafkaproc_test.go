package devstack

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKafkaProcess runs the broker as a child process (this test binary
// under kafkaChildEnv): it announces its address, takes its own name,
// persists what it acknowledged across a Stop and a restart, and a child
// that cannot start (its data directory is locked by the running one) is
// an error that shows its log.
func TestKafkaProcess(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kafka")
	t.Setenv(kafkaChildEnv, dir)
	cfg := KafkaProcessConfig{Command: []string{os.Args[0], "-test.run=^$"}, LogFile: filepath.Join(t.TempDir(), "kafka.log")}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, addr, err := StartKafkaProcess(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID()) + "/comm"); strings.TrimSpace(string(comm)) != KafkaProcessName {
		t.Errorf("the broker child is named %q, want %q", comm, KafkaProcessName)
	}
	produce(t, addr, "seeded", "x", "y")

	_, _, err = StartKafkaProcess(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "exited during startup") || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second broker on the same data directory: err = %v", err)
	}

	stop(t, p)
	p, addr, err = StartKafkaProcess(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := consume(t, addr, "seeded", 2); strings.Join(got, ",") != "x,y" {
		t.Fatalf("after a stop and a restart the broker child holds %v, want x,y", got)
	}
	stop(t, p)
}
