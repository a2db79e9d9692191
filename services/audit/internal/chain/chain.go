// Package chain is the audit log's hash chain: the canonical encoding of a
// row, its SHA-256 hash, and the rules verification applies. It does no I/O.
package chain

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"
)

// HashSize is the size of a row hash.
const HashSize = sha256.Size

// Genesis is the prev_hash of the first row of every chain.
var Genesis = make([]byte, HashSize)

// domain separates these hashes from any other SHA-256 use; bump the
// version if the encoding ever changes.
const domain = "ferry.audit.v1"

// Row is what a chained row's hash covers.
type Row struct {
	ChainID  string
	Seq      int64
	PrevHash []byte
	EventID  string
	TenantID string
	JobID    string
	Type     string
	Attempt  int
	// Occurred is truncated to microseconds, Postgres's precision.
	Occurred time.Time
	Actor    string
	TraceID  string
	// Data is the event data exactly as stored (data::text): the text the
	// event carried, which the json column keeps byte for byte (rows
	// stored while the column was jsonb: the text Postgres rendered for
	// it), so a hash recomputed from a stored row matches.
	Data []byte
}

// Encode is the canonical encoding of r: the domain tag, then every field in
// a fixed order, strings and byte strings length-prefixed (uint32 big
// endian), integers as int64 big endian, the time as Unix microseconds.
// Length prefixes make the encoding injective: no two rows share it.
func Encode(r Row) []byte {
	return appendEncoding(nil, &r)
}

// Hash is SHA-256 over Encode(r). The projection hashes every row it
// appends, so the encoding goes to a buffer on the stack when it fits (a
// row's fixed fields and usual data do) rather than to a fresh one.
func Hash(r Row) []byte {
	var buf [1024]byte
	h := sha256.Sum256(appendEncoding(buf[:0], &r))
	return h[:]
}

// appendEncoding appends Encode(*r) to b.
func appendEncoding(b []byte, r *Row) []byte {
	b = appendString(b, domain)
	b = appendString(b, r.ChainID)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Seq))
	b = appendBytes(b, r.PrevHash)
	b = appendString(b, r.EventID)
	b = appendString(b, r.TenantID)
	b = appendString(b, r.JobID)
	b = appendString(b, r.Type)
	b = binary.BigEndian.AppendUint64(b, uint64(int64(r.Attempt)))
	b = binary.BigEndian.AppendUint64(b, uint64(r.Occurred.UnixMicro()))
	b = appendString(b, r.Actor)
	b = appendString(b, r.TraceID)
	return appendBytes(b, r.Data)
}

func appendString(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

func appendBytes(b, s []byte) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

// ID names the chain of a tenant's events on one Kafka topic partition.
// One consumer owns a partition, so parallel consumers never share a chain.
func ID(tenant, topic string, partition int32) string {
	return fmt.Sprintf("%s/%s/%d", tenant, topic, partition)
}

// Position is where a verification walk stands in a chain: the last seq and
// hash it accepted.
type Position struct {
	Seq  int64
	Hash []byte
}

// Reasons a chain is broken.
const (
	// ReasonHashMismatch: the row's stored hash is not the hash of its
	// contents — the row was altered.
	ReasonHashMismatch = "hash_mismatch"
	// ReasonSeqGap: seqs are missing before this row — rows were removed.
	ReasonSeqGap = "seq_gap"
	// ReasonSeqRepeat: the seq was already seen — a row was inserted.
	ReasonSeqRepeat = "seq_repeat"
	// ReasonPrevHashMismatch: the row does not link to the previous one —
	// a row before it was removed, replaced or inserted.
	ReasonPrevHashMismatch = "prev_hash_mismatch"
	// ReasonTruncated: the chain ends before its recorded head — rows at
	// the end were removed.
	ReasonTruncated = "truncated"
)

// Check verifies row r (whose stored hash is stored) as the successor of
// pos. It returns "" and the new position when r is sound, else the reason
// and a human-readable detail.
func Check(pos Position, r Row, stored []byte) (next Position, reason, detail string) {
	switch {
	case r.Seq <= pos.Seq:
		return pos, ReasonSeqRepeat, fmt.Sprintf("seq %d follows seq %d", r.Seq, pos.Seq)
	case r.Seq != pos.Seq+1:
		return pos, ReasonSeqGap, fmt.Sprintf("expected seq %d, found %d: %d row(s) missing", pos.Seq+1, r.Seq, r.Seq-pos.Seq-1)
	case !bytes.Equal(Hash(r), stored):
		return pos, ReasonHashMismatch, "the row's contents do not match its hash: the row was altered"
	case !bytes.Equal(r.PrevHash, pos.Hash):
		return pos, ReasonPrevHashMismatch, "prev_hash does not match the hash of the previous row"
	}
	return Position{Seq: r.Seq, Hash: stored}, "", ""
}
