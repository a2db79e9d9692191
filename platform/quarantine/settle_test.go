package quarantine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestIsPoison(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("dial tcp: connection refused"), false},
		{context.Canceled, false},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{&pgconn.PgError{Code: "08006"}, false},
		{&pgconn.PgError{Code: "57P01"}, false},
		{&pgconn.PgError{Code: "40P01"}, false},
		{&pgconn.PgError{Code: "53100"}, false},
		{&pgconn.PgError{Code: "42P01"}, false},
		{&pgconn.PgError{Code: "22021"}, true},
		{fmt.Errorf("store: upsert: %w", &pgconn.PgError{Code: "22P05"}), true},
		{&pgconn.PgError{Code: "23505"}, true},
		{&pgconn.PgError{Code: "54000"}, true},
		{fmt.Errorf("%w (uncompressed_bytes=2000000)", kerr.MessageTooLarge), true},
		{kerr.RecordListTooLarge, true},
		{kerr.NotLeaderForPartition, false},
		{kerr.TopicAuthorizationFailed, false},
		{Poison(errors.New("undecodable")), true},
		{Poison(fmt.Errorf("x: %w", context.Canceled)), false},
	} {
		if got := IsPoison(c.err); got != c.want {
			t.Errorf("IsPoison(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// memConsumer applies records in memory: a record whose value is "bad"
// fails the whole batch with poison, and the first transient calls fail
// with a connection error.
type memConsumer struct {
	applied   []string // values, in apply order
	parked    []string
	transient int
	calls     int
}

func (m *memConsumer) apply(_ context.Context, recs []*kgo.Record) error {
	m.calls++
	if m.calls <= m.transient {
		return &pgconn.PgError{Code: "08006", Message: "connection failure"}
	}
	for _, r := range recs {
		if string(r.Value) == "bad" {
			return &pgconn.PgError{Code: "22021", Message: "invalid byte sequence"}
		}
	}
	for _, r := range recs {
		m.applied = append(m.applied, string(r.Value))
	}
	return nil
}

func (m *memConsumer) park(_ context.Context, rec *kgo.Record, cause error, tries int) error {
	if !IsPoison(cause) || tries < MaxTries {
		return fmt.Errorf("parked %s after %d tries with %v", rec.Value, tries, cause)
	}
	m.parked = append(m.parked, fmt.Sprintf("%d/%d", rec.Partition, rec.Offset))
	return nil
}

// records interleaves three partitions as a poll does; values are p/o.
func records(n int, bad ...string) []*kgo.Record {
	var out []*kgo.Record
	for i := range n {
		p, o := int32(i%3), int64(i/3)
		v := fmt.Sprintf("%d/%d", p, o)
		if slices.Contains(bad, v) {
			v = "bad"
		}
		out = append(out, &kgo.Record{Topic: "t", Partition: p, Offset: o, Value: []byte(v)})
	}
	return out
}

func settler(m *memConsumer) *Settler {
	return &Settler{Group: "g", Apply: m.apply, Park: m.park, MaxBackoff: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// TestSettleBisects: poison records are parked, every other record is
// applied exactly once, and each partition's records in offset order.
func TestSettleBisects(t *testing.T) {
	m := &memConsumer{}
	recs := records(200, "1/7", "2/40", "2/41")
	if err := settler(m).Settle(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if want := []string{"1/7", "2/40", "2/41"}; !slices.Equal(m.parked, want) {
		t.Fatalf("parked %v, want %v", m.parked, want)
	}
	if len(m.applied) != 197 {
		t.Fatalf("%d applied, want 197", len(m.applied))
	}
	next := map[int32]int64{}
	for _, v := range m.applied {
		var p int32
		var o int64
		fmt.Sscanf(v, "%d/%d", &p, &o)
		if o < next[p] {
			t.Fatalf("partition %d: offset %d applied after %d (order %v)", p, o, next[p]-1, m.applied)
		}
		next[p] = o + 1
	}
}

// TestSettleTransientNeverParks: transient failures, however many, are
// retried and do not count towards parking.
func TestSettleTransientNeverParks(t *testing.T) {
	m := &memConsumer{transient: 20}
	if err := settler(m).Settle(context.Background(), records(30)); err != nil {
		t.Fatal(err)
	}
	if len(m.parked) != 0 || len(m.applied) != 30 {
		t.Fatalf("parked %v, applied %d", m.parked, len(m.applied))
	}
}

// TestSettleWithoutParkRetries: a consumer without a quarantine store keeps
// retrying until ctx ends, and says so.
func TestSettleWithoutParkRetries(t *testing.T) {
	m := &memConsumer{}
	s := settler(m)
	s.Park = nil
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := s.Settle(ctx, records(10, "0/1")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Settle = %v, want the context's error", err)
	}
	if len(m.applied) != 0 || m.calls < 5 {
		t.Fatalf("applied %v after %d calls", m.applied, m.calls)
	}
}

func TestBytesAndTruncate(t *testing.T) {
	for _, b := range [][]byte{[]byte("plain"), {0xff, 0xfe}, []byte("a\x00b"), {}} {
		e := EncodeBytes(b)
		raw, err := e.Raw()
		if err != nil || string(raw) != string(b) {
			t.Fatalf("%q → %+v → %q %v", b, e, raw, err)
		}
		if (e.Encoding == "text") != (string(b) == "plain" || len(b) == 0) {
			t.Fatalf("%q encoded as %s", b, e.Encoding)
		}
	}
	long := strings.Repeat("é", 20)
	for _, n := range []int{0, 3, 21, 39} {
		s := Truncate(long, n)
		if len(s) > n || !utf8.ValidString(s) || !strings.HasPrefix(long, strings.TrimSuffix(s, "…[truncated]")) {
			t.Fatalf("Truncate(%d) = %q", n, s)
		}
	}
	if Truncate("short", 16) != "short" {
		t.Fatal("Truncate changed a short string")
	}
	if got := errorText(errors.New("a\x00b\xff")); got != `a\u0000b`+"\uFFFD" {
		t.Fatalf("errorText = %q", got)
	}
}
