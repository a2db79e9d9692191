package pgstore_test

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryhq/ferry/platform/pgstore"
	"github.com/ferryhq/ferry/platform/testenv"
)

// copyRow is one row of every type CopyWriter writes, NULLs included.
type copyRow struct {
	text     string
	nullText string
	data     []byte // bytea
	doc      json.RawMessage
	docB     json.RawMessage // jsonb; empty is NULL
	i4       int
	i8       int64
	flag     bool
	f8       *float64
	at       time.Time
	maybeAt  *time.Time
	tags     []string
}

var copyColumns = []string{"text", "null_text", "data", "doc", "doc_b", "i4", "i8", "flag", "f8", "at", "maybe_at", "tags"}

func (r copyRow) values() []any {
	var nullText, docB any
	if r.nullText != "" {
		nullText = r.nullText
	}
	if len(r.docB) > 0 {
		docB = r.docB
	}
	tags := r.tags
	if tags == nil {
		tags = []string{}
	}
	return []any{r.text, nullText, r.data, string(r.doc), docB, int32(r.i4), r.i8, r.flag, r.f8, r.at, r.maybeAt, tags}
}

func (r copyRow) write(w *pgstore.CopyWriter) {
	w.Row(len(copyColumns))
	w.Text(r.text)
	w.NullText(r.nullText)
	w.Bytes(r.data)
	w.Bytes(r.doc)
	w.JSONB(r.docB)
	w.Int4(r.i4)
	w.Int8(r.i8)
	w.Bool(r.flag)
	w.NullFloat8(r.f8)
	w.Timestamptz(r.at)
	w.NullTimestamptz(r.maybeAt)
	w.TextArray(r.tags)
}

// connect opens a connection to the test Postgres, closed when t ends.
func connect(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestCopyWriterStoresWhatPgxStores copies one set of rows with pgx's
// CopyFrom into one table and with CopyWriter into another of the same
// columns, and compares what Postgres stored, value by value: CopyWriter
// must send the same bytes pgx would (times to the microsecond, NULLs,
// empty arrays, JSON as given, unicode, the ends of each integer range).
func TestCopyWriterStoresWhatPgxStores(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // the tables are temporary
	const cols = `(n serial, text text NOT NULL, null_text text, data bytea, doc json, doc_b jsonb, i4 int NOT NULL,
		i8 bigint NOT NULL, flag bool NOT NULL, f8 float8, at timestamptz NOT NULL, maybe_at timestamptz, tags text[] NOT NULL)`
	for _, table := range []string{"by_pgx", "by_writer"} {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE `+table+` `+cols); err != nil {
			t.Fatal(err)
		}
	}

	half, neg := 0.5, -1e300
	nano := time.Date(2026, 11, 28, 19, 4, 26, 549537999, time.FixedZone("x", 5*3600+1800))
	old := time.Date(1969, 7, 20, 20, 17, 40, 123456000, time.UTC)
	rows := []copyRow{
		{text: "plain", data: []byte{0, 1, 255}, doc: json.RawMessage(`{"a": [1, 2.50, "x"]}`), docB: json.RawMessage(`{"b":{"c":null}}`),
			i4: 42, i8: 1 << 40, flag: true, f8: &half, at: nano, maybeAt: &old, tags: []string{"vip", "eu"}},
		{text: "", data: []byte{}, doc: json.RawMessage(`null`), i4: math.MinInt32, i8: math.MinInt64, at: old, tags: nil},
		{text: "ünïcödé ✓ 日本", nullText: "set", doc: json.RawMessage("[\n  \"\\u00e9\"\n]"), docB: json.RawMessage(`[1e2, "é", true]`),
			i4: math.MaxInt32, i8: math.MaxInt64, f8: &neg, at: time.Unix(0, 0), tags: []string{"", "a,b", `q"uote`, "日本"}},
		{text: strings.Repeat("long ", 20000), doc: json.RawMessage(`{}`), at: time.Date(2000, 1, 1, 0, 0, 0, 999, time.UTC), tags: []string{}},
	}

	src := make([][]any, len(rows))
	for i, r := range rows {
		src[i] = r.values()
	}
	if n, err := tx.CopyFrom(ctx, pgx.Identifier{"by_pgx"}, copyColumns, pgx.CopyFromRows(src)); err != nil || n != int64(len(rows)) {
		t.Fatalf("pgx copy: %d rows, %v", n, err)
	}
	w := pgstore.NewCopyWriter()
	for _, r := range rows {
		r.write(w)
	}
	if n, err := w.Copy(ctx, tx, pgx.Identifier{"by_writer"}, copyColumns); err != nil || n != int64(len(rows)) {
		t.Fatalf("CopyWriter: %d rows, %v", n, err)
	}

	// Each column as its text, compared with IS NOT DISTINCT FROM (NULLs
	// equal), json compared as its text (json keeps what it was given).
	var diff []string
	var conds []string
	for _, c := range append([]string{"n"}, copyColumns...) {
		conds = append(conds, "a."+c+"::text IS NOT DISTINCT FROM b."+c+"::text")
	}
	rs, err := tx.Query(ctx, `SELECT a.n, row_to_json(a)::text, row_to_json(b)::text FROM by_pgx a FULL JOIN by_writer b ON a.n = b.n
		WHERE NOT (`+strings.Join(conds, " AND ")+`)`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var n *int
		var a, b *string
		if err := rs.Scan(&n, &a, &b); err != nil {
			t.Fatal(err)
		}
		diff = append(diff, strings.Join([]string{deref(a), deref(b)}, "\n   writer: "))
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	if len(diff) > 0 {
		t.Fatalf("rows stored differently:\n   pgx:    %s", strings.Join(diff, "\n   pgx:    "))
	}
	var stored int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM by_writer`).Scan(&stored); err != nil || stored != len(rows) {
		t.Fatalf("%d rows stored (%v)", stored, err)
	}
}

func deref(s *string) string {
	if s == nil {
		return "(none)"
	}
	if len(*s) > 300 {
		return (*s)[:300] + "…"
	}
	return *s
}

// TestCopyWriterRefusesWhatDoesNotFit: a value beyond its column's range
// fails the COPY before anything is sent, and Postgres's own refusals
// (a NUL in text, invalid JSON) come back as errors with nothing stored.
func TestCopyWriterRefusesWhatDoesNotFit(t *testing.T) {
	ctx := context.Background()
	conn := connect(t)
	for _, c := range []struct {
		name  string
		cols  []string
		write func(w *pgstore.CopyWriter)
		want  string
	}{
		{"int4 overflow", []string{"s", "i"}, func(w *pgstore.CopyWriter) { w.Row(2); w.Text("x"); w.Int4(math.MaxInt32 + 1) }, "does not fit an int4"},
		{"NUL in text", []string{"s", "i"}, func(w *pgstore.CopyWriter) { w.Row(2); w.Text("a\x00b"); w.Int4(1) }, "invalid byte sequence"},
		{"invalid jsonb", []string{"s", "i", "d"}, func(w *pgstore.CopyWriter) { w.Row(3); w.Text("x"); w.Int4(1); w.JSONB([]byte(`{"a":`)) }, "invalid input syntax for type json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx) //nolint:errcheck // the table is temporary
			if _, err := tx.Exec(ctx, `CREATE TEMP TABLE refused (s text, i int, d jsonb)`); err != nil {
				t.Fatal(err)
			}
			w := pgstore.NewCopyWriter()
			c.write(w)
			n, err := w.Copy(ctx, tx, pgx.Identifier{"refused"}, c.cols)
			if err == nil || !strings.Contains(err.Error(), c.want) || n != 0 {
				t.Fatalf("copied %d rows, err %v; want an error saying %q", n, err, c.want)
			}
		})
	}
}
