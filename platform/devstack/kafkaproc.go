package devstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// KafkaProcessName is the command name (/proc/<pid>/comm, what ps shows) a
// broker child takes once it serves, so that tools that account per process
// (the benchmark's CPU lines) tell it from the program that started it,
// which is the same executable.
const KafkaProcessName = "ferry-kafka"

// kafkaReadyFD is the descriptor on which a broker child announces its
// address: the first of exec.Cmd.ExtraFiles.
const kafkaReadyFD = 3

// KafkaProcessConfig configures [StartKafkaProcess].
type KafkaProcessConfig struct {
	// Command is the program and its arguments, a program whose main calls
	// [ServeKafka] with the broker's settings (`ferry dev` re-executes its
	// own binary). Required.
	Command []string

	// LogFile receives the child's output. Required.
	LogFile string

	// StartTimeout bounds startup when ctx has no deadline: reloading a
	// large data directory takes a while. Defaults to 2 minutes.
	StartTimeout time.Duration
}

// StartKafkaProcess runs an embedded broker in a child process, like
// PostgreSQL and Redis: its own process group, SIGTERM on the parent's
// death, and [Process.Stop] sends SIGTERM, on which [ServeKafka] persists
// its data directory and exits. It returns once the child has announced the
// address it listens on, over a pipe, so a broker that failed to start
// (a port or data directory in use) is an error here, with its log.
//
// A broker of its own process keeps its allocations and event loop out of
// the parent's heap and garbage collector, and its CPU time is its own in
// per-process accounting.
func StartKafkaProcess(ctx context.Context, cfg KafkaProcessConfig) (*Process, string, error) {
	if len(cfg.Command) == 0 || cfg.LogFile == "" {
		return nil, "", errors.New("devstack: KafkaProcessConfig needs Command and LogFile")
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	ctx, cancel := withStartTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, "", fmt.Errorf("devstack: kafka ready pipe: %w", err)
	}
	defer readyR.Close()
	logOffset := fileSize(cfg.LogFile)
	p, err := startProcess(processSpec{
		name:       "kafka",
		path:       cfg.Command[0],
		args:       cfg.Command[1:],
		stopSig:    syscall.SIGTERM, // ServeKafka persists its state and exits
		logPath:    cfg.LogFile,
		extraFiles: []*os.File{readyW},
	})
	readyW.Close() // the child holds its own copy: EOF once it exits
	if err != nil {
		return nil, "", err
	}
	addr, err := awaitKafkaAddr(ctx, p, readyR, logOffset)
	if err != nil {
		stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer stopCancel()
		_ = p.Stop(stopCtx)
		return nil, "", err
	}
	return p, addr, nil
}

// awaitKafkaAddr reads the address line the child writes once its broker
// listens. The pipe ends without one when the child exits first.
func awaitKafkaAddr(ctx context.Context, p *Process, ready *os.File, logOffset int64) (string, error) {
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(ready).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case addr := <-line:
		if addr != "" {
			return addr, nil
		}
		<-p.Done() // no address: the child is exiting
		return "", p.exitedEarly(logOffset)
	case <-ctx.Done():
		return "", fmt.Errorf("devstack: kafka not ready: %w; log %s:\n%s", ctx.Err(), p.LogPath(), logTail(p.LogPath(), logOffset))
	}
}

// ServeKafka is the body of a broker child started by [StartKafkaProcess]:
// it takes the name [KafkaProcessName], starts the broker of cfg, announces
// its address to the parent and serves until ctx ends (the caller cancels
// it on SIGTERM: a stop, or the parent's death), then stops the broker,
// which writes its state to cfg.DataDir.
func ServeKafka(ctx context.Context, cfg KafkaConfig) error {
	// Best effort: only the accounting and ps depend on the name.
	_ = os.WriteFile("/proc/self/comm", []byte(KafkaProcessName), 0)
	k, err := StartKafka(cfg)
	if err != nil {
		return err
	}
	ready := os.NewFile(kafkaReadyFD, "kafka-ready")
	if ready == nil {
		_ = k.Stop(context.Background())
		return errors.New("devstack: no ready descriptor: ServeKafka runs in a child of StartKafkaProcess")
	}
	_, err = fmt.Fprintln(ready, k.Addr())
	ready.Close()
	if err != nil {
		_ = k.Stop(context.Background())
		return fmt.Errorf("devstack: announce kafka address: %w", err)
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultStopTimeout)
	defer cancel()
	return k.Stop(stopCtx)
}
