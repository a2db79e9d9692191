package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultStopTimeout is how long [Process.Stop] waits for a clean exit when
// its context has no deadline, before it kills the process.
const DefaultStopTimeout = 30 * time.Second

// killWait bounds the wait for a process to disappear after SIGKILL.
const killWait = 5 * time.Second

// Process is a server running as a child process of this one.
type Process struct {
	name    string
	cmd     *exec.Cmd
	stopSig syscall.Signal
	logPath string

	done    chan struct{} // closed once the process has exited and been reaped
	waitErr error         // cmd.Wait's result; read only after done is closed

	signalOnce sync.Once
	stopped    chan struct{} // closed when Stop has been called
}

// processSpec describes a child process to start.
type processSpec struct {
	name    string
	path    string
	args    []string
	dir     string
	cred    *syscall.Credential
	stopSig syscall.Signal // sent by Stop and on the parent's death
	logPath string         // stdout and stderr are appended here
	// extraFiles are inherited as descriptors 3, 4, …: a ready pipe.
	extraFiles []*os.File
}

// startProcess starts spec in its own process group with a parent-death
// signal, its output appended to spec.logPath.
func startProcess(spec processSpec) (*Process, error) {
	logf, err := os.OpenFile(spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: open log: %w", spec.name, err)
	}
	defer logf.Close() // the child holds its own descriptor

	cmd := exec.Command(spec.path, spec.args...)
	cmd.Dir = spec.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.ExtraFiles = spec.extraFiles
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a terminal's Ctrl-C goes to the parent only,
		// which stops the servers after its services have drained.
		Setpgid: true,
		// If the parent dies without stopping us (a killed test binary or
		// dev run), the kernel sends this signal. Go sets it after the
		// credentials change, so it survives running as another user.
		Pdeathsig:  spec.stopSig,
		Credential: spec.cred,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", spec.name, spec.path, err)
	}
	p := &Process{
		name:    spec.name,
		cmd:     cmd,
		stopSig: spec.stopSig,
		logPath: spec.logPath,
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// PID returns the operating-system process id of the server.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Name returns a short name of the server, such as "postgres".
func (p *Process) Name() string { return p.name }

// LogPath returns the file the server's output is appended to.
func (p *Process) LogPath() string { return p.logPath }

// Done returns a channel that is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop asks the server to shut down cleanly (SIGTERM for Redis; SIGINT,
// PostgreSQL's "fast" shutdown, for PostgreSQL, since its SIGTERM waits for
// every client to disconnect) and waits for it to exit. If it is still
// running when ctx is done, or after [DefaultStopTimeout] when ctx has no
// deadline, its whole process group is killed with SIGKILL and Stop returns
// an error. Stop is safe to call more than once and from several goroutines;
// it returns nil for a process that exited cleanly or had already exited.
func (p *Process) Stop(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStopTimeout)
		defer cancel()
	}
	p.signalOnce.Do(func() {
		close(p.stopped)
		// ESRCH only means it is already gone; done will close.
		_ = syscall.Kill(p.PID(), p.stopSig)
	})
	select {
	case <-p.done:
		return p.exitError()
	case <-ctx.Done():
	}
	// Kill the group so that the server's own children go too.
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	_ = syscall.Kill(p.PID(), syscall.SIGKILL)
	select {
	case <-p.done:
		return fmt.Errorf("%s (pid %d) did not stop in time and was killed: %w", p.name, p.PID(), ctx.Err())
	case <-time.After(killWait):
		return fmt.Errorf("%s (pid %d) did not exit even after SIGKILL", p.name, p.PID())
	}
}

// exitError interprets the exit of a process we asked to stop.
func (p *Process) exitError() error {
	if p.waitErr == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == p.stopSig {
			return nil // it did not catch the signal, which still is a stop
		}
	}
	return fmt.Errorf("%s (pid %d) exited uncleanly: %w; see %s", p.name, p.PID(), p.waitErr, p.logPath)
}

// exitedEarly reports the exit of a process that stopped before it was ready.
func (p *Process) exitedEarly(logOffset int64) error {
	return fmt.Errorf("%s exited during startup (%v); log %s:\n%s", p.name, p.waitErr, p.logPath, logTail(p.logPath, logOffset))
}

// logTail returns at most the last 4 KiB written to path after offset.
func logTail(path string, offset int64) string {
	const max = 4 << 10
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	if st.Size()-offset > max {
		offset = st.Size() - max
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return strings.TrimSpace(string(b))
}

// fileSize returns the size of path, 0 if it does not exist.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. Another
// process can take it before the caller binds it; the Start functions retry
// on a fresh port when they picked it themselves and lost that race.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// withStartTimeout bounds ctx by d when it has no deadline of its own.
func withStartTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// portAttempts is how many ports a Start function tries when it chose the
// port itself and another process bound it first.
const portAttempts = 3

// errPortInUse marks a start that failed because the port was taken.
var errPortInUse = errors.New("port already in use")

// pollInterval is how often readiness is probed during startup.
const pollInterval = 50 * time.Millisecond
