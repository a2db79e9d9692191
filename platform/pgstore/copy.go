package pgstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// CopyWriter builds the rows of a binary COPY whose column types the
// caller knows, and sends them in one COPY ... FROM STDIN BINARY.
//
// pgx's CopyFrom takes each row as []any and encodes every value through
// its type map (a plan lookup per value, the value boxed into an
// interface, a time converted through a wrapper), and it asks the server
// for the table's column types first, one more round trip per COPY. The
// projections append thousands of rows a second whose types are fixed in
// their code, where that generic path was ~5 % of `ferry dev`'s CPU and
// ~10 % of its allocations (docs/performance.md, Round 18). The values
// are the same bytes pgx sends: CopyWriter's test copies one set of rows
// both ways and compares what Postgres stored.
//
// Call Row once per row, then exactly one value method per column, in the
// order of the columns given to Copy. A value that does not fit its
// column's type (an int beyond int4) is an error at Copy; nothing is sent.
type CopyWriter struct {
	buf []byte
	err error
}

// copyHeader is the binary COPY signature, a zero flags field and a zero
// header extension length.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

var copyWriters = sync.Pool{New: func() any { return &CopyWriter{} }}

// NewCopyWriter returns an empty writer; Copy returns it for reuse.
func NewCopyWriter() *CopyWriter {
	w := copyWriters.Get().(*CopyWriter)
	w.buf = append(w.buf[:0], copyHeader...)
	w.err = nil
	return w
}

// Row starts a row of n columns.
func (w *CopyWriter) Row(n int) {
	w.buf = binary.BigEndian.AppendUint16(w.buf, uint16(n))
}

func (w *CopyWriter) field(n int) { w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(n)) }

// Null is a NULL value.
func (w *CopyWriter) Null() { w.buf = binary.BigEndian.AppendUint32(w.buf, math.MaxUint32) }

// Text is a text value (also varchar and json: their binary form is the text).
func (w *CopyWriter) Text(s string) {
	w.field(len(s))
	w.buf = append(w.buf, s...)
}

// Bytes is a bytea value, or the text of a text or json column; nil is
// NULL (as pgx sends it), an empty slice the empty value.
func (w *CopyWriter) Bytes(b []byte) {
	if b == nil {
		w.Null()
		return
	}
	w.field(len(b))
	w.buf = append(w.buf, b...)
}

// NullText is s, or NULL when s is empty.
func (w *CopyWriter) NullText(s string) {
	if s == "" {
		w.Null()
		return
	}
	w.Text(s)
}

// JSONB is a jsonb value (format version 1, then the JSON text as it is),
// or NULL when b is empty. Postgres checks the text as it parses it.
func (w *CopyWriter) JSONB(b []byte) {
	if len(b) == 0 {
		w.Null()
		return
	}
	w.field(len(b) + 1)
	w.buf = append(w.buf, 1)
	w.buf = append(w.buf, b...)
}

// Int4 is an int4 value; one beyond its range fails the COPY.
func (w *CopyWriter) Int4(v int) {
	if v < math.MinInt32 || v > math.MaxInt32 {
		w.fail(fmt.Errorf("pgstore: copy: %d does not fit an int4 column", v))
	}
	w.field(4)
	w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(int32(v)))
}

// Int8 is an int8 (bigint) value.
func (w *CopyWriter) Int8(v int64) {
	w.field(8)
	w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(v))
}

// Bool is a boolean value.
func (w *CopyWriter) Bool(v bool) {
	w.field(1)
	if v {
		w.buf = append(w.buf, 1)
	} else {
		w.buf = append(w.buf, 0)
	}
}

// NullFloat8 is *v as a float8 value, or NULL when v is nil.
func (w *CopyWriter) NullFloat8(v *float64) {
	if v == nil {
		w.Null()
		return
	}
	w.field(8)
	w.buf = binary.BigEndian.AppendUint64(w.buf, math.Float64bits(*v))
}

// microsecondsToY2K is the Unix time of 2000-01-01 00:00 UTC, the epoch of
// Postgres's timestamps, in microseconds.
const microsecondsToY2K = 946684800 * 1000000

// Timestamptz is a timestamptz value: microseconds since 2000-01-01 UTC,
// the nanoseconds below a microsecond dropped (as pgx does).
func (w *CopyWriter) Timestamptz(t time.Time) {
	w.field(8)
	us := t.Unix()*1000000 + int64(t.Nanosecond())/1000 - microsecondsToY2K
	w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(us))
}

// NullTimestamptz is *t, or NULL when t is nil.
func (w *CopyWriter) NullTimestamptz(t *time.Time) {
	if t == nil {
		w.Null()
		return
	}
	w.Timestamptz(*t)
}

// textOID is the type of a text[]'s elements.
const textOID = 25

// TextArray is a one-dimensional text[] value without NULL elements; an
// empty (or nil) ss is the empty array, not NULL.
func (w *CopyWriter) TextArray(ss []string) {
	size := 12
	if len(ss) > 0 {
		size += 8
	}
	for _, s := range ss {
		size += 4 + len(s)
	}
	w.field(size)
	dims := uint32(0)
	if len(ss) > 0 {
		dims = 1
	}
	w.buf = binary.BigEndian.AppendUint32(w.buf, dims)
	w.buf = binary.BigEndian.AppendUint32(w.buf, 0) // no NULL elements
	w.buf = binary.BigEndian.AppendUint32(w.buf, textOID)
	if len(ss) > 0 {
		w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(len(ss)))
		w.buf = binary.BigEndian.AppendUint32(w.buf, 1) // lower bound
	}
	for _, s := range ss {
		w.Text(s)
	}
}

func (w *CopyWriter) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// Copy sends the rows to table's columns in one COPY inside tx and
// returns how many the server stored. The writer goes back to a pool: do
// not use it afterwards.
func (w *CopyWriter) Copy(ctx context.Context, tx pgx.Tx, table pgx.Identifier, columns []string) (int64, error) {
	defer w.release()
	if w.err != nil {
		return 0, w.err
	}
	w.buf = binary.BigEndian.AppendUint16(w.buf, math.MaxUint16) // the trailer: -1
	quoted := make([]string, len(columns))
	for i, c := range columns {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	sql := "COPY " + table.Sanitize() + " (" + strings.Join(quoted, ", ") + ") FROM STDIN BINARY"
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(w.buf), sql)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// maxPooledCopy is the largest buffer kept for the next COPY: a rare huge
// batch does not pin its memory.
const maxPooledCopy = 4 << 20

func (w *CopyWriter) release() {
	if cap(w.buf) > maxPooledCopy {
		w.buf = nil
	}
	copyWriters.Put(w)
}
