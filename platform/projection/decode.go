package projection

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/background"
)

// Decode returns rec's event. Under a Shared reader it is decoded once for
// every projection of the reader (the first to ask decodes it); otherwise,
// and for a record an operator retries, it is schema.Decode(rec).
//
// The event may therefore be shared with projections applying concurrently:
// read it, never change it in place (copy a slice, map or pointed-to
// field before changing it).
func Decode(ctx context.Context, rec *kgo.Record) (schema.Event, error) {
	background.Step()
	polls, _ := ctx.Value(decodesKey{}).([]*decodes)
	for _, ds := range polls {
		if i, ok := ds.index[rec]; ok {
			d := &ds.events[i]
			d.once.Do(func() { d.ev, d.err = schema.Decode(rec) })
			return d.ev, d.err
		}
	}
	return schema.Decode(rec)
}

// decodes are the events of one poll of a Shared reader, each decoded on
// first use. index is written once, before any projection sees the poll's
// records, and only read after.
type decodes struct {
	index  map[*kgo.Record]int
	events []decoded
}

type decoded struct {
	once sync.Once
	ev   schema.Event
	err  error
}

type decodesKey struct{}

func newDecodes(recs []*kgo.Record) *decodes {
	ds := &decodes{index: make(map[*kgo.Record]int, len(recs)), events: make([]decoded, len(recs))}
	for i, r := range recs {
		ds.index[r] = i
	}
	return ds
}

// withDecodes returns ctx carrying the decoded events of the polls a batch
// came from, for Decode.
func withDecodes(ctx context.Context, polls []*decodes) context.Context {
	return context.WithValue(ctx, decodesKey{}, polls)
}
