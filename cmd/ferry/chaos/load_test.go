package chaos_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// load submits a batch of short jobs every interval, each batch under its
// own Idempotency-Key, to the apis it is given in turn. A batch whose
// answer is lost (the api stopped or died mid-request, refused the
// connection, answered 5xx or "in flight") is resent with the same key,
// to the next api, as a client behind a load balancer would: the key makes
// the resend the same jobs, so a lost answer is never a lost or doubled
// job. It runs until halt.
type load struct {
	c     *cluster
	batch int
	every time.Duration

	mu      sync.Mutex
	bases   []string
	next    int
	ids     []string
	resends int

	stop chan struct{}
	done chan struct{}
}

// startLoad starts submitting batch jobs every interval to bases.
func (c *cluster) startLoad(batch int, every time.Duration, bases ...string) *load {
	l := &load{c: c, batch: batch, every: every, bases: bases, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	c.t.Cleanup(func() { l.halt() })
	return l
}

// setAPIs replaces the apis the load is sent to.
func (l *load) setAPIs(bases ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.bases = append([]string(nil), bases...)
}

// halt stops the load, waits for the batch under way, and returns the ids
// of every job submitted.
func (l *load) halt() []string {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ids...)
}

// submitted is how many jobs were accepted so far.
func (l *load) submitted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ids)
}

func (l *load) run() {
	defer close(l.done)
	tick := time.NewTicker(l.every)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		ids, err := l.send(fmt.Sprintf("load-%d", n), sleepJobs(l.batch, 50))
		if err != nil {
			l.c.t.Errorf("load: %v", err)
			return
		}
		l.mu.Lock()
		l.ids = append(l.ids, ids...)
		l.mu.Unlock()
	}
}

// send submits jobs under key until an api accepts them, for up to a
// minute, and returns their ids.
func (l *load) send(key string, jobs []map[string]any) ([]string, error) {
	body, _ := json.Marshal(map[string]any{"jobs": jobs})
	deadline := time.Now().Add(time.Minute)
	var last string
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			l.mu.Lock()
			l.resends++
			l.mu.Unlock()
			time.Sleep(200 * time.Millisecond)
		}
		status, raw, err := l.post(l.pick(), key, body)
		switch {
		case err != nil:
			last = err.Error()
			continue
		case status >= 500 || status == http.StatusConflict:
			last = fmt.Sprintf("%d %s", status, raw)
			continue
		case status != http.StatusAccepted && status != http.StatusOK:
			return nil, fmt.Errorf("batch %s: %d %s", key, status, raw)
		}
		return batchIDs(key, raw)
	}
	return nil, fmt.Errorf("batch %s: no api accepted it within a minute; last answer: %s", key, last)
}

// pick is the next api in turn.
func (l *load) pick() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	return l.bases[l.next%len(l.bases)]
}

func (l *load) post(base, key string, body []byte) (int, []byte, error) {
	req, _ := http.NewRequest("POST", base+"/v1/jobs/batch", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+l.c.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// batchIDs are the job ids of a batch answer; every item must have one.
func batchIDs(key string, raw []byte) ([]string, error) {
	var out struct {
		Jobs []struct {
			ID string `json:"id"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("batch %s: %v: %s", key, err, raw)
	}
	ids := make([]string, 0, len(out.Jobs))
	for _, j := range out.Jobs {
		if j.ID == "" {
			return nil, fmt.Errorf("batch %s: an item was rejected: %s", key, raw)
		}
		ids = append(ids, j.ID)
	}
	return ids, nil
}
