// Package fanout turns lifecycle events into delivery rows: it keeps the
// active endpoints in memory, matches each event against its tenant's
// endpoints and writes the outbox rows inside the projection transaction
// that also stores the Kafka offsets.
package fanout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/projection"
	"github.com/ferryhq/ferry/services/webhooks/internal/policy"
	"github.com/ferryhq/ferry/services/webhooks/internal/store"
)

// Endpoint is an active endpoint as matched in memory.
type Endpoint struct {
	ID     string
	Filter policy.Filter
}

// Cache holds the active endpoints, by tenant. It is safe for concurrent use.
//
// It is kept current two ways: Apply compares the endpoint change counter
// inside each fan-out transaction and reloads when it moved (so an event
// produced after an endpoint change is matched against it, on every
// replica), and Run reloads periodically for the delivery loop's benefit
// when no events flow.
type Cache struct {
	store *store.Store
	log   *slog.Logger

	mu       sync.RWMutex
	version  int64
	byTenant map[string][]Endpoint
	ids      []string
}

// NewCache returns an empty cache over st; call Refresh before use.
func NewCache(st *store.Store, log *slog.Logger) *Cache {
	return &Cache{store: st, log: log, byTenant: map[string][]Endpoint{}}
}

// Refresh reloads the active endpoints.
func (c *Cache) Refresh(ctx context.Context) error {
	version, all, err := c.store.ActiveEndpoints(ctx)
	if err != nil {
		return err
	}
	c.set(version, all)
	return nil
}

// set installs the endpoints current as of version, unless the cache
// already holds a newer version (a slow reload must not undo a fresh one).
func (c *Cache) set(version int64, all []store.Active) {
	by := make(map[string][]Endpoint)
	ids := make([]string, 0, len(all))
	for _, a := range all {
		f := policy.Filter{Queue: a.FilterQueue, Type: a.FilterTyp}
		for _, et := range a.EventTypes {
			f.EventTypes = append(f.EventTypes, schema.EventType(et))
		}
		by[a.TenantID] = append(by[a.TenantID], Endpoint{ID: a.ID, Filter: f})
		ids = append(ids, a.ID)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if version < c.version {
		return
	}
	c.version, c.byTenant, c.ids = version, by, ids
}

// catchUp reloads the endpoints inside tx when they changed since the
// cache was loaded.
func (c *Cache) catchUp(ctx context.Context, tx pgx.Tx) error {
	version, err := store.EndpointVersion(ctx, tx)
	if err != nil {
		return err
	}
	c.mu.RLock()
	current := version <= c.version
	c.mu.RUnlock()
	if current {
		return nil
	}
	version, all, err := store.ActiveEndpoints(ctx, tx)
	if err != nil {
		return err
	}
	c.set(version, all)
	return nil
}

// Run refreshes the cache every interval until ctx is done.
func (c *Cache) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.Refresh(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("webhooks: refresh endpoints", "err", err)
			}
		}
	}
}

// IDs returns the ids of every active endpoint.
func (c *Cache) IDs() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.ids
}

// For returns the active endpoints of tenant.
func (c *Cache) For(tenant string) []Endpoint {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.byTenant[tenant]
}

// DeliveryID is the webhook-id of an event sent to an endpoint: derived
// from both, so it is the same on every retry and on a re-read record.
func DeliveryID(eventID, endpointID string) string {
	h := sha256.Sum256([]byte(endpointID + "\x00" + eventID))
	return "msg_" + hex.EncodeToString(h[:16])
}

// cloudEvent is the structured-mode CloudEvents JSON body of a delivery.
type cloudEvent struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            string          `json:"type"`
	Time            time.Time       `json:"time"`
	Subject         string          `json:"subject"`
	Tenant          string          `json:"tenant"`
	DataContentType string          `json:"datacontenttype"`
	TraceParent     string          `json:"traceparent,omitempty"`
	Data            json.RawMessage `json:"data"`
}

// Body returns the CloudEvents JSON of a decoded record.
func Body(ev schema.Event, value []byte) ([]byte, error) {
	return json.Marshal(cloudEvent{
		SpecVersion: "1.0", ID: ev.ID, Source: ev.Source, Type: ev.Type, Time: ev.Time.UTC(),
		Subject: ev.Subject, Tenant: ev.Tenant, DataContentType: "application/json",
		TraceParent: ev.TraceParent, Data: json.RawMessage(value),
	})
}

// fanItem is one lifecycle event some endpoint of its tenant listens to.
type fanItem struct {
	ev    schema.Event
	et    schema.EventType
	value []byte
	eps   []Endpoint
	job   *policy.JobInfo // nil until known (filters on queue or type need it)
}

// fanBatch is what Apply gathers from a batch before writing.
type fanBatch struct {
	items  []fanItem
	jobs   []store.JobRow // job attributes the batch itself carries
	lookup []string       // jobs whose attributes must be read from the store
}

// Apply is the projection.ApplyFunc of the fan-out: it turns each event
// into one delivery per matching endpoint of its tenant.
func (c *Cache) Apply(ctx context.Context, tx pgx.Tx, recs []*kgo.Record) error {
	if err := c.catchUp(ctx, tx); err != nil {
		return err
	}
	var b fanBatch
	for _, r := range recs {
		c.gather(ctx, &b, r)
	}
	if len(b.items) == 0 {
		return nil
	}
	if err := store.UpsertJobs(ctx, tx, b.jobs); err != nil {
		return err
	}
	known, err := store.Jobs(ctx, tx, b.lookup)
	if err != nil {
		return err
	}
	ds, err := deliveries(b.items, known)
	if err != nil {
		return err
	}
	return store.InsertDeliveries(ctx, tx, ds)
}

// gather adds r to b when an endpoint of its tenant listens. The cheap
// path reads only the CloudEvents headers: a record of a tenant without
// endpoints is never decoded. The event comes from projection.Decode
// (shared with the other projections of a shared reader): read, never
// changed.
func (c *Cache) gather(ctx context.Context, b *fanBatch, r *kgo.Record) {
	m, err := schema.DecodeMeta(r)
	if err != nil {
		c.log.Warn("webhooks: skipping undecodable record", "topic", r.Topic, "offset", r.Offset, "err", err)
		return
	}
	eps := c.For(m.Tenant)
	if len(eps) == 0 {
		return
	}
	ev, err := projection.Decode(ctx, r)
	if err != nil {
		c.log.Warn("webhooks: skipping undecodable record", "topic", r.Topic, "offset", r.Offset, "err", err)
		return
	}
	lc, ok := ev.Data.(schema.Lifecycle)
	if !ok {
		return
	}
	it := fanItem{ev: ev, et: lc.EventType(), value: r.Value, eps: eps}
	if slices.ContainsFunc(eps, func(e Endpoint) bool { return e.Filter.NeedsJob() }) {
		b.jobInfo(&it)
	}
	b.items = append(b.items, it)
}

// jobInfo sets it.job from the event when it carries the job's attributes
// (enqueued, dlq), remembering them for later events; otherwise the job is
// looked up.
func (b *fanBatch) jobInfo(it *fanItem) {
	var spec *schema.JobSpec
	var runAt time.Time
	switch d := it.ev.Data.(type) {
	case schema.Enqueued:
		spec, runAt = &d.Job, d.RunAt
	case schema.DeadLettered:
		spec = &d.Job
	}
	if spec == nil {
		b.lookup = append(b.lookup, it.ev.Subject)
		return
	}
	it.job = &policy.JobInfo{Queue: spec.Queue, Type: spec.Type}
	b.jobs = append(b.jobs, store.JobRow{JobID: it.ev.Subject, TenantID: it.ev.Tenant, Queue: spec.Queue, Type: spec.Type, RunAt: runAt})
}

// deliveries is one delivery per item and matching endpoint; the body is
// built once per event.
func deliveries(items []fanItem, known map[string]store.JobRow) ([]store.NewDelivery, error) {
	var ds []store.NewDelivery
	for _, it := range items {
		if it.job == nil {
			if j, ok := known[it.ev.Subject]; ok && j.TenantID == it.ev.Tenant {
				it.job = &policy.JobInfo{Queue: j.Queue, Type: j.Type}
			}
		}
		var body []byte
		for _, e := range it.eps {
			if !e.Filter.Match(it.et, it.job) {
				continue
			}
			if body == nil {
				var err error
				if body, err = Body(it.ev, it.value); err != nil {
					return nil, err
				}
			}
			ds = append(ds, store.NewDelivery{
				ID: DeliveryID(it.ev.ID, e.ID), TenantID: it.ev.Tenant, EndpointID: e.ID,
				EventID: it.ev.ID, EventType: string(it.et), JobID: it.ev.Subject, Body: body,
			})
		}
	}
	return ds, nil
}
