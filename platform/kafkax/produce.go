package kafkax

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ProduceAll produces records and waits until every one is acknowledged
// (acks=all). It returns the first error; on error some records may have
// been written, which is fine for Ferry's at-least-once, idempotent events.
func ProduceAll(ctx context.Context, cl *kgo.Client, recs ...*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	return cl.ProduceSync(ctx, recs...).FirstErr()
}
