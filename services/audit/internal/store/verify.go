package store

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryhq/ferry/services/audit/internal/chain"
)

// Break is the first row at which a chain stops verifying.
type Break struct {
	ChainID  string `json:"chain_id"`
	TenantID string `json:"tenant_id"`
	// EventID and Seq name the offending row; empty and the expected seq
	// when rows are missing at the end of the chain.
	EventID string `json:"event_id,omitempty"`
	Seq     int64  `json:"seq"`
	Reason  string `json:"reason"`
	Detail  string `json:"detail"`
}

// Report is the result of a verification walk.
type Report struct {
	OK            bool    `json:"ok"`
	ChainsChecked int     `json:"chains_checked"`
	RowsChecked   int64   `json:"rows_checked"`
	Broken        []Break `json:"broken"`
	// Cuts counts chains whose beginning retention dropped; their walk
	// starts after the recorded cut.
	Cuts       int       `json:"cuts"`
	VerifiedAt time.Time `json:"verified_at"`
}

// Verify walks every chain of tenant ("" = every tenant) in seq order,
// batch rows per query, and reports the first broken row of each chain. It
// reads one consistent snapshot, so rows appended meanwhile are not
// mistaken for tampering.
func (s *Store) Verify(ctx context.Context, tenant string, batch int) (Report, error) {
	rep := Report{VerifiedAt: s.now().UTC(), Broken: []Break{}}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return rep, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck

	type head struct {
		id, tenant string
		pos        chain.Position
		cut        *chain.Position
	}
	rows, err := tx.Query(ctx, `
		SELECT h.chain_id, h.tenant_id, h.seq, h.hash, c.last_seq, c.last_hash
		FROM audit_chain_heads h
		LEFT JOIN LATERAL (SELECT last_seq, last_hash FROM audit_chain_cuts c
			WHERE c.chain_id = h.chain_id ORDER BY last_seq DESC LIMIT 1) c ON true
		WHERE $1 = '' OR h.tenant_id = $1
		ORDER BY h.chain_id`, tenant)
	if err != nil {
		return rep, fmt.Errorf("audit: verify: %w", err)
	}
	// Heads are one row per chain: small next to the rows themselves.
	var heads []head
	for rows.Next() {
		var h head
		var cutSeq *int64
		var cutHash []byte
		if err := rows.Scan(&h.id, &h.tenant, &h.pos.Seq, &h.pos.Hash, &cutSeq, &cutHash); err != nil {
			rows.Close()
			return rep, fmt.Errorf("audit: verify: %w", err)
		}
		if cutSeq != nil {
			h.cut = &chain.Position{Seq: *cutSeq, Hash: cutHash}
		}
		heads = append(heads, h)
	}
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("audit: verify: %w", err)
	}

	for _, h := range heads {
		rep.ChainsChecked++
		start := chain.Position{Seq: 0, Hash: chain.Genesis}
		if h.cut != nil {
			rep.Cuts++
			start = *h.cut
			// Rows at or before the cut that retention kept (their
			// occurred_at put them in a newer partition) can no longer be
			// linked; check that each still matches its own hash.
			n, brk, err := walk(ctx, tx, h.id, 0, start.Seq, batch, func(r chain.Row, stored []byte) (string, string) {
				if !bytes.Equal(chain.Hash(r), stored) {
					return chain.ReasonHashMismatch, "the row's contents do not match its hash: the row was altered"
				}
				return "", ""
			})
			rep.RowsChecked += n
			if err != nil {
				return rep, err
			}
			if brk != nil {
				brk.TenantID = h.tenant
				rep.Broken = append(rep.Broken, *brk)
				continue
			}
		}
		pos := start
		n, brk, err := walk(ctx, tx, h.id, start.Seq, h.pos.Seq, batch, func(r chain.Row, stored []byte) (string, string) {
			next, reason, detail := chain.Check(pos, r, stored)
			pos = next
			return reason, detail
		})
		rep.RowsChecked += n
		if err != nil {
			return rep, err
		}
		switch {
		case brk != nil:
			brk.TenantID = h.tenant
			rep.Broken = append(rep.Broken, *brk)
		case pos.Seq != h.pos.Seq:
			rep.Broken = append(rep.Broken, Break{ChainID: h.id, TenantID: h.tenant, Seq: pos.Seq + 1, Reason: chain.ReasonTruncated,
				Detail: fmt.Sprintf("the chain ends at seq %d but its head is seq %d: rows were removed", pos.Seq, h.pos.Seq)})
		case !bytes.Equal(pos.Hash, h.pos.Hash):
			rep.Broken = append(rep.Broken, Break{ChainID: h.id, TenantID: h.tenant, Seq: pos.Seq, Reason: chain.ReasonHashMismatch,
				Detail: "the last row's hash differs from the recorded chain head"})
		}
	}
	rep.OK = len(rep.Broken) == 0
	return rep, nil
}

// walk calls check for every row of chainID with from < seq <= to, in seq
// order, batch rows per query, and stops at the first row check rejects.
func walk(ctx context.Context, tx pgx.Tx, chainID string, from, to int64, batch int,
	check func(r chain.Row, stored []byte) (reason, detail string)) (int64, *Break, error) {
	var n int64
	after, afterID := from, ""
	for {
		// (seq, event_id) keyset: a duplicated seq (an inserted row) is
		// still visited rather than skipped.
		rows, err := tx.Query(ctx, `
			SELECT chain_id, seq, prev_hash, event_id, tenant_id, job_id, type, attempt, occurred_at,
				actor, trace_id, data::text, hash
			FROM audit_events WHERE chain_id = $1 AND (seq, event_id) > ($2, $3) AND seq <= $4
			ORDER BY seq, event_id LIMIT $5`, chainID, after, afterID, to, batch)
		if err != nil {
			return n, nil, fmt.Errorf("audit: verify walk: %w", err)
		}
		got := 0
		var brk *Break
		for rows.Next() {
			var r chain.Row
			var data string
			var stored []byte
			if err := rows.Scan(&r.ChainID, &r.Seq, &r.PrevHash, &r.EventID, &r.TenantID, &r.JobID, &r.Type, &r.Attempt,
				&r.Occurred, &r.Actor, &r.TraceID, &data, &stored); err != nil {
				rows.Close()
				return n, nil, fmt.Errorf("audit: verify walk: %w", err)
			}
			r.Data = []byte(data)
			got++
			n++
			after, afterID = r.Seq, r.EventID
			if reason, detail := check(r, stored); reason != "" {
				brk = &Break{ChainID: chainID, EventID: r.EventID, Seq: r.Seq, Reason: reason, Detail: detail}
				break
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return n, nil, fmt.Errorf("audit: verify walk: %w", err)
		}
		if brk != nil {
			return n, brk, nil
		}
		if got < batch {
			return n, nil, nil
		}
	}
}
