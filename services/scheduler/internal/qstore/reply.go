package qstore

// The replies of the apply and dispatch scripts, decoded by named reads in
// the order the scripts write them (the comment above each decoder names
// the Lua that writes it). ops_test.go decodes real replies.

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferryhq/ferry/events/schema"
)

// errShortReply is a reply with fewer values than its counts announce.
var errShortReply = errors.New("short reply")

// replyReader reads a script's flat reply value by value. A read past the
// end yields the zero value and sets err.
type replyReader struct {
	v   []any
	i   int
	err error
}

func (r *replyReader) next() any {
	if r.i >= len(r.v) {
		r.err = errShortReply
		return nil
	}
	x := r.v[r.i]
	r.i++
	return x
}

func (r *replyReader) str() string { return str(r.next()) }

func (r *replyReader) int() int64 {
	switch x := r.next().(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

// left is how many values are unread.
func (r *replyReader) left() int { return len(r.v) - r.i }

// templateWire is a template as the scripts return it: strings, JSON and
// RFC 3339 times, decoded by template.
type templateWire struct {
	JobID, DispatchID, TenantID, Attempt string
	Created, Ready, Spec, History        string
	RedrivenFrom                         string
}

func (w templateWire) template() (Template, error) {
	t := Template{JobID: w.JobID, DispatchID: w.DispatchID, TenantID: w.TenantID, RedrivenFrom: w.RedrivenFrom}
	a, err := strconv.ParseFloat(w.Attempt, 64)
	if err != nil || a > math.MaxInt32 {
		return t, fmt.Errorf("qstore: job %s: bad attempt %q", w.JobID, w.Attempt)
	}
	t.Attempt = int(a)
	if w.Spec != "" {
		if t.Job, err = schema.UnmarshalSpec([]byte(w.Spec)); err != nil {
			return t, fmt.Errorf("qstore: job %s: bad spec: %w", w.JobID, err)
		}
	}
	if w.History != "" {
		if t.History, err = schema.UnmarshalHistory([]byte(w.History)); err != nil {
			return t, fmt.Errorf("qstore: job %s: bad history: %w", w.JobID, err)
		}
	}
	t.CreatedAt, _ = time.Parse(time.RFC3339Nano, w.Created)
	t.ReadyAt, _ = time.Parse(time.RFC3339Nano, w.Ready)
	return t, nil
}

// failedTemplate reads apply.lua's template(): id did attempt tenant
// created ready spec history rf.
func (r *replyReader) failedTemplate() (Template, error) {
	var w templateWire
	w.JobID, w.DispatchID, w.Attempt, w.TenantID = r.str(), r.str(), r.str(), r.str()
	w.Created, w.Ready, w.Spec, w.History, w.RedrivenFrom = r.str(), r.str(), r.str(), r.str(), r.str()
	return w.template()
}

// supersededTemplate reads apply.lua's superseded entry: id tenant attempt did.
func (r *replyReader) supersededTemplate() (Template, error) {
	var w templateWire
	w.JobID, w.TenantID, w.Attempt, w.DispatchID = r.str(), r.str(), r.str(), r.str()
	return w.template()
}

// dispatchedTemplate reads a dispatch.lua dispatched entry: id did attempt
// tenant created ready spec lease_until_ms.
func (r *replyReader) dispatchedTemplate() (Template, error) {
	var w templateWire
	w.JobID, w.DispatchID, w.Attempt, w.TenantID = r.str(), r.str(), r.str(), r.str()
	w.Created, w.Ready, w.Spec = r.str(), r.str(), r.str()
	lease := r.int()
	t, err := w.template()
	t.LeaseUntil = time.UnixMilli(lease)
	return t, err
}

// expiredTemplate reads dispatch.lua's expired(): id attempt tenant created
// ready spec history rf.
func (r *replyReader) expiredTemplate() (Template, error) {
	var w templateWire
	w.JobID, w.Attempt, w.TenantID = r.str(), r.str(), r.str()
	w.Created, w.Ready, w.Spec, w.History, w.RedrivenFrom = r.str(), r.str(), r.str(), r.str(), r.str()
	return w.template()
}

// Wake names the dispatch loops an Apply should wake (apply.lua's
// wake_reply): a pool's loop runs a step that costs Redis ~100 µs even when
// it finds nothing, so only the pools where a job may have become
// dispatchable or a slot was freed with work waiting, or every pool (All)
// after a gate change, which may admit jobs of any pool.
type Wake struct {
	All   bool
	Pools []string
}

// Any reports whether any loop should run a step.
func (w Wake) Any() bool { return w.All || len(w.Pools) > 0 }

// Has reports whether pool's loop should run a step.
func (w Wake) Has(pool string) bool { return w.All || slices.Contains(w.Pools, pool) }

// add merges one apply call's wake reply: '*', or space-separated pools.
func (w *Wake) add(reply string) {
	if reply == "*" {
		w.All = true
		return
	}
	for pool := range strings.FieldsSeq(reply) {
		if !slices.Contains(w.Pools, pool) {
			w.Pools = append(w.Pools, pool)
		}
	}
}

// decodeApplyReply adds one apply call's reply to res: {wake, n_failed,
// failed templates..., superseded entries...}.
func decodeApplyReply(v []any, res *ApplyResult) error {
	r := replyReader{v: v}
	if r.left() < 2 {
		return nil
	}
	res.Wake.add(r.str())
	for range r.int() {
		t, err := r.failedTemplate()
		if err != nil {
			return err
		}
		res.Failed = append(res.Failed, t)
	}
	for r.err == nil && r.left() >= 4 {
		t, err := r.supersededTemplate()
		if err != nil {
			return err
		}
		res.Superseded = append(res.Superseded, t)
	}
	if r.err != nil {
		return fmt.Errorf("qstore: apply: %w", r.err)
	}
	return nil
}

// decodeDispatchReply decodes a dispatch call's reply: {next_due_ms,
// next_lease_ms, n_dispatched, n_expired, more, dispatched..., expired...,
// n_dispatched traceparents, expired lease count, n_dispatched partitions,
// n_dispatched not-before ms (0: none)}.
func decodeDispatchReply(v []any) (DispatchResult, error) {
	var res DispatchResult
	r := replyReader{v: v}
	if ms := r.int(); ms >= 0 {
		res.NextDue = time.UnixMilli(ms)
	}
	if ms := r.int(); ms >= 0 {
		res.NextLease = time.UnixMilli(ms)
	}
	nd, ne := r.int(), r.int()
	res.More = r.int() == 1
	if r.err != nil || int64(r.left()) < 8*(nd+ne) {
		return res, errShortReply
	}
	res.Dispatched = make([]Template, 0, nd)
	for range nd {
		t, err := r.dispatchedTemplate()
		if err != nil {
			return res, err
		}
		res.Dispatched = append(res.Dispatched, t)
	}
	for range ne {
		t, err := r.expiredTemplate()
		if err != nil {
			return res, err
		}
		res.Expired = append(res.Expired, t)
	}
	for k := range res.Dispatched {
		res.Dispatched[k].TraceParent = r.str()
	}
	res.LeaseExpiries = int(r.int())
	for k := range res.Dispatched {
		res.Dispatched[k].Partition = int32(r.int())
	}
	for k := range res.Dispatched {
		if ms := r.int(); ms > 0 {
			res.Dispatched[k].NotBefore = time.UnixMilli(ms)
		}
	}
	return res, r.err
}
