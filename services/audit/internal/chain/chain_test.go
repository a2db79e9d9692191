package chain

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"
)

func row() Row {
	return Row{ChainID: "acme/ferry.jobs.started/0", Seq: 1, PrevHash: Genesis, EventID: "e1", TenantID: "acme",
		JobID: "job_1", Type: "started", Attempt: 1, Occurred: time.Unix(1700000000, 123456000).UTC(),
		Actor: "ferry/worker", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Data: []byte(`{"a": 1}`)}
}

func TestHashCoversEveryField(t *testing.T) {
	base := Hash(row())
	if len(base) != HashSize || !bytes.Equal(base, Hash(row())) {
		t.Fatal("hash is not a stable SHA-256")
	}
	for name, mut := range map[string]func(*Row){
		"chain": func(r *Row) { r.ChainID += "x" }, "seq": func(r *Row) { r.Seq++ },
		"prev": func(r *Row) { r.PrevHash = bytes.Repeat([]byte{1}, HashSize) }, "event": func(r *Row) { r.EventID += "x" },
		"tenant": func(r *Row) { r.TenantID += "x" }, "job": func(r *Row) { r.JobID += "x" }, "type": func(r *Row) { r.Type += "x" },
		"attempt": func(r *Row) { r.Attempt++ }, "occurred": func(r *Row) { r.Occurred = r.Occurred.Add(time.Microsecond) },
		"actor": func(r *Row) { r.Actor += "x" }, "trace": func(r *Row) { r.TraceID = "" }, "data": func(r *Row) { r.Data = []byte(`{"a": 2}`) },
		// Length prefixes: moving a byte from one field to the next changes the hash.
		"boundary": func(r *Row) { r.TenantID, r.JobID = "acmej", "ob_1" },
	} {
		r := row()
		mut(&r)
		if bytes.Equal(Hash(r), base) {
			t.Errorf("changing %s does not change the hash", name)
		}
	}
}

// TestHashIsStable pins the encoding: rows already stored must verify
// under any later implementation of it.
func TestHashIsStable(t *testing.T) {
	empty := row()
	empty.Data, empty.TraceID = nil, ""
	for want, r := range map[string]Row{
		"db786258b7eb7192d284faf4c2994c972cf165d6ff044b400b45d505e41e492d": row(),
		"0c36b022f62187ee770a30065c747af1c001aeb3ad17337dc2d5b224a2efd3f3": empty,
	} {
		if got := hex.EncodeToString(Hash(r)); got != want {
			t.Errorf("Hash = %s, want %s", got, want)
		}
		if sum := sha256.Sum256(Encode(r)); !bytes.Equal(sum[:], Hash(r)) {
			t.Error("Hash is not SHA-256 over Encode")
		}
	}
	big := row()
	big.Data = bytes.Repeat([]byte("x"), 5000)
	if sum := sha256.Sum256(Encode(big)); !bytes.Equal(sum[:], Hash(big)) || len(Encode(big)) < 5000 {
		t.Error("a row beyond the stack buffer hashes differently")
	}
}

func TestCheck(t *testing.T) {
	r1 := row()
	h1 := Hash(r1)
	pos, reason, _ := Check(Position{Hash: Genesis}, r1, h1)
	if reason != "" || pos.Seq != 1 {
		t.Fatalf("first row: %q %+v", reason, pos)
	}
	r2 := row()
	r2.Seq, r2.PrevHash, r2.EventID = 2, h1, "e2"
	h2 := Hash(r2)
	if _, reason, _ := Check(pos, r2, h2); reason != "" {
		t.Fatalf("second row: %q", reason)
	}
	cases := map[string]func() (Row, []byte){
		ReasonHashMismatch:     func() (Row, []byte) { r := r2; r.Actor = "mallory"; return r, h2 },
		ReasonSeqGap:           func() (Row, []byte) { r := r2; r.Seq = 3; return r, Hash(r) },
		ReasonSeqRepeat:        func() (Row, []byte) { return r1, h1 },
		ReasonPrevHashMismatch: func() (Row, []byte) { r := r2; r.PrevHash = Genesis; return r, Hash(r) },
	}
	for want, mk := range cases {
		r, stored := mk()
		if _, reason, _ := Check(pos, r, stored); reason != want {
			t.Errorf("got %q, want %q", reason, want)
		}
	}
}
