package api

import (
	"encoding/json"
	"net/http"
	"sync"

	"github.com/ferryhq/ferry/platform/httpx"
)

// The answers that are a job (submissions, GET, a schedule's trigger) or
// a batch of them, encoded by hand (jobs.Job.AppendJSON) into
// pooled buffers: at a thousand single POSTs a second encoding/json was a
// sixth of the api's CPU per request (docs/performance.md, Round 13). The
// bytes are what httpx.WriteJSON writes for the same values; what the hand
// encoders leave to encoding/json (errors, rare members) still goes
// through it.

// answerBuffers hold answers while they are written; one that grew beyond
// maxPooledAnswer (a batch of large payloads) is left to the GC. The limit
// keeps the answer to a full batch of small jobs (1,000 resources of
// ~400 bytes) pooled: a buffer grown anew for each batch was ~4 % of the
// bytes the stack allocated at full load.
var answerBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledAnswer = 1 << 20

// writeAnswer writes with status what encode appends to a pooled buffer,
// or v through httpx.WriteJSON when encode fails (its error is
// encoding/json's, which WriteJSON meets again).
func writeAnswer(w http.ResponseWriter, status int, v any, encode func([]byte) ([]byte, error)) {
	buf := answerBuffers.Get().(*[]byte)
	defer answerBuffers.Put(buf)
	b, err := encode((*buf)[:0])
	if cap(b) <= maxPooledAnswer {
		*buf = b[:0]
	}
	if err != nil {
		httpx.WriteJSON(w, status, v)
		return
	}
	httpx.WriteEncoded(w, status, b)
}

// writeJob answers with one job resource.
func writeJob(w http.ResponseWriter, status int, j *Job) {
	writeAnswer(w, status, j, j.AppendJSON)
}

// writeBatch answers a batch.
func writeBatch(w http.ResponseWriter, status int, resp batchResponse) {
	writeAnswer(w, status, resp, resp.appendJSON)
}

// appendJSON appends json.Marshal(r)'s bytes: each job by hand, errors
// through encoding/json.
func (r batchResponse) appendJSON(b []byte) ([]byte, error) {
	if r.Jobs == nil {
		b = append(b, `{"jobs":null`...)
	} else {
		b = append(b, `{"jobs":[`...)
		for i, it := range r.Jobs {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = it.appendJSON(b); err != nil {
				return b, err
			}
		}
		b = append(b, ']')
	}
	if r.Error != nil {
		out, err := json.Marshal(r.Error)
		if err != nil {
			return b, err
		}
		b = append(append(b, `,"error":`...), out...)
	}
	return append(b, '}'), nil
}

// appendJSON appends json.Marshal(it)'s bytes: a job alone is its
// resource (the embedded *Job's members, no error member).
func (it batchItem) appendJSON(b []byte) ([]byte, error) {
	if it.Job != nil && it.Error == nil {
		return it.Job.AppendJSON(b)
	}
	out, err := json.Marshal(it)
	return append(b, out...), err
}
