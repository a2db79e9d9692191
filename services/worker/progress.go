package worker

import (
	"context"
	"sync"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// reporter sends what an attempt reports while it runs: its started event,
// at most one progress event per Config.ProgressInterval (always sending
// the last report) and a heartbeat every Config.Heartbeat. Its loop (a
// goroutine, a ticker and three channels) starts only at the first report
// or the first heartbeat: most jobs end before either, and then cost one
// timer, which first waits for the started event's deadline and then for
// the first heartbeat.
//
// The started event waits up to Config.StartedDelay, and goes out before
// anything else the attempt produces (a progress event, a heartbeat, its
// outcome): a job that ends within the delay has its started and its
// outcome produced together, so the broker, the scheduler, the projections
// and the sse-bridge each take them in one request, one fetch and one
// batch, and the scheduler's lease renewal for the start is dropped for
// the outcome that follows it (docs/performance.md, Round 17). Its
// started_at is the handler's start whenever it is sent.
type reporter struct {
	startedOnce sync.Once
	sendStarted func()

	mu      sync.Mutex
	percent float64
	message string
	dirty   bool
	// running says the loop was started; stopped that stop began (no
	// loop starts after it).
	running, stopped bool
	// timer fires at the started event's deadline, then (beatArmed) at the
	// first heartbeat, beatIn later.
	timer     *time.Timer
	beatArmed bool
	beatIn    time.Duration
	start     func(heartbeat bool)

	notify chan struct{}
	done   chan struct{}
	exited chan struct{}
}

// startReporter starts the reporter of dispatch d; sendStarted produces
// its started event.
func (s *Service) startReporter(ctx context.Context, d schema.Dispatch, sendStarted func()) *reporter {
	r := &reporter{sendStarted: sendStarted}
	r.start = func(heartbeat bool) {
		r.notify, r.done, r.exited = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go r.loop(ctx, s, d, heartbeat)
	}
	first := s.cfg.Heartbeat
	if delay := s.cfg.StartedDelay; delay > 0 && delay < first {
		first, r.beatIn = delay, first-delay
	} else {
		r.flushStarted()
		r.beatArmed = true
	}
	r.mu.Lock()
	r.timer = time.AfterFunc(first, r.fire)
	r.mu.Unlock()
	return r
}

// fire is the timer's: at the started event's deadline it sends the event
// and waits for the first heartbeat; at the first heartbeat it starts the
// loop with one.
func (r *reporter) fire() {
	r.mu.Lock()
	if r.beatArmed {
		defer r.mu.Unlock()
		r.startLocked(true)
		return
	}
	r.beatArmed = true
	r.mu.Unlock()
	r.flushStarted()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.stopped {
		r.timer.Reset(r.beatIn)
	}
}

// flushStarted sends the started event unless it was sent.
func (r *reporter) flushStarted() { r.startedOnce.Do(r.sendStarted) }

// startLocked starts the loop unless it runs or stop began; heartbeat
// says it starts with a heartbeat (the first one is due).
func (r *reporter) startLocked(heartbeat bool) {
	if r.running || r.stopped {
		return
	}
	r.running = true
	r.start(heartbeat)
}

// report records a progress report; the message is made storable text
// (valid UTF-8, no NUL, at most maxProgressMessage bytes).
func (r *reporter) report(percent float64, message string) {
	message = schema.EventText(message, maxProgressMessage)
	r.mu.Lock()
	r.percent, r.message, r.dirty = percent, message, true
	r.startLocked(false)
	notify := r.notify
	r.mu.Unlock()
	if notify == nil {
		return // stop began before any loop: nothing is sent after the attempt ended
	}
	select {
	case notify <- struct{}{}:
	default:
	}
}

// last returns the latest reported percent.
func (r *reporter) last() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.percent
}

// stop sends the started event if it waits, flushes a pending report and
// waits for the loop, if it started, to end: the attempt's outcome is
// produced after it.
func (r *reporter) stop() {
	r.mu.Lock()
	r.stopped = true
	r.timer.Stop()
	running := r.running
	r.mu.Unlock()
	r.flushStarted()
	if running {
		close(r.done)
		<-r.exited
	}
}

// loop sends the reports and heartbeats; heartbeat says one is due now.
func (r *reporter) loop(ctx context.Context, s *Service, d schema.Dispatch, heartbeat bool) {
	defer close(r.exited)
	hb := time.NewTicker(s.cfg.Heartbeat)
	defer hb.Stop()
	var last time.Time
	var wait *time.Timer
	var waitC <-chan time.Time
	send := func(force bool) {
		r.mu.Lock()
		if !r.dirty && !force {
			r.mu.Unlock()
			return
		}
		p := &schema.Progress{JobRef: d.JobRef, WorkerID: s.cfg.WorkerID, DispatchID: d.DispatchID,
			Percent: r.percent, Message: r.message, At: time.Now().UTC()}
		r.dirty = false
		r.mu.Unlock()
		r.flushStarted()
		s.produceAsync(ctx, p)
		last = time.Now()
	}
	// maybeSend sends now if the last event is old enough, else makes sure
	// a timer will send when it is.
	maybeSend := func() {
		since := time.Since(last)
		if since >= s.cfg.ProgressInterval {
			if waitC != nil {
				wait.Stop()
				waitC = nil
			}
			send(false)
			return
		}
		if waitC == nil {
			wait = time.NewTimer(s.cfg.ProgressInterval - since)
			waitC = wait.C
		}
	}
	defer func() {
		if wait != nil {
			wait.Stop()
		}
	}()
	if heartbeat {
		send(true)
	}
	for {
		select {
		case <-r.done:
			send(false)
			return
		case <-r.notify:
			maybeSend()
		case <-waitC:
			waitC = nil
			maybeSend()
		case <-hb.C:
			// A heartbeat extends the lease; a progress event sent
			// recently already did.
			if time.Since(last) >= s.cfg.Heartbeat/2 {
				send(true)
			}
		}
	}
}
