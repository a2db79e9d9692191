package audit

import (
	"encoding/csv"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ferryhq/ferry/services/audit/internal/store"
)

// An export streams a tenant's audit rows for as long as the client reads
// them, so it must not hold what others need: rows are read a page at a
// time with a connection that goes back to the pool before the page is
// written (store.Each), every write must finish within the write timeout (a client that stops reading is cut off instead of pinning the
// handler forever), and a tenant runs at most ExportConcurrency exports at
// once per replica.

// exportRetryAfter is the Retry-After of too_many_exports.
const exportRetryAfter = 5 * time.Second

// exportSlots counts the exports in progress per tenant.
type exportSlots struct {
	mu  sync.Mutex
	max int
	n   map[string]int
}

func newExportSlots(max int) *exportSlots { return &exportSlots{max: max, n: map[string]int{}} }

// acquire takes one of tenant's slots, or reports that all are taken.
func (e *exportSlots) acquire(tenant string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n[tenant] >= e.max {
		return false
	}
	e.n[tenant]++
	return true
}

// release gives back a slot acquire took.
func (e *exportSlots) release(tenant string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n[tenant]--; e.n[tenant] <= 0 {
		delete(e.n, tenant)
	}
}

// exportWriter writes pages of rows in one format, each write under a
// fresh deadline, and flushes after each page.
type exportWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	csv     *csv.Writer   // format csv
	enc     *json.Encoder // format ndjson
}

func newExportWriter(w http.ResponseWriter, format string, timeout time.Duration) *exportWriter {
	ew := &exportWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		ew.csv = csv.NewWriter(w)
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
		ew.enc = json.NewEncoder(w)
	}
	return ew
}

// deadline gives the next writes timeout to complete. A writer that cannot
// take deadlines (not a plain HTTP/1 or HTTP/2 connection) is written
// without one; the export still holds no Postgres connection.
func (ew *exportWriter) deadline() {
	_ = ew.rc.SetWriteDeadline(time.Now().Add(ew.timeout))
}

// begin writes what precedes the rows (the CSV header).
func (ew *exportWriter) begin() error {
	if ew.csv == nil {
		return nil
	}
	ew.deadline()
	return ew.csv.Write(csvHeader)
}

// page writes rows and flushes them to the client, each write (a row, the
// flush) within the timeout.
func (ew *exportWriter) page(rows []store.Event) error {
	for _, e := range rows {
		ew.deadline()
		if err := ew.row(e); err != nil {
			return err
		}
	}
	ew.deadline()
	return ew.flush()
}

func (ew *exportWriter) row(e store.Event) error {
	if ew.csv == nil {
		return ew.enc.Encode(e)
	}
	return ew.csv.Write([]string{e.EventID, e.TenantID, e.JobID, e.Type, strconv.Itoa(e.Attempt),
		e.OccurredAt.Format(time.RFC3339Nano), e.RecordedAt.Format(time.RFC3339Nano), e.Actor, e.TraceID,
		e.ChainID, strconv.FormatInt(e.Seq, 10), e.PrevHash, e.Hash, string(e.Data)})
}

func (ew *exportWriter) flush() error {
	if ew.csv != nil {
		ew.csv.Flush()
		if err := ew.csv.Error(); err != nil {
			return err
		}
	}
	return ew.rc.Flush()
}

// close flushes what is left and clears the deadline, so a kept-alive
// connection's next request does not inherit it; report gets a failure.
func (ew *exportWriter) close(report func(error)) {
	ew.deadline()
	err := ew.flush()
	if derr := ew.rc.SetWriteDeadline(time.Time{}); derr != nil && !errors.Is(derr, http.ErrNotSupported) {
		err = errors.Join(err, derr)
	}
	if err != nil {
		report(err)
	}
}
