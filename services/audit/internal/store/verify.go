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
	heads, err := loadHeads(ctx, tx, tenant)
	if err != nil {
		return rep, err
	}
	for _, h := range heads {
		rep.ChainsChecked++
		if h.cut != nil {
			rep.Cuts++
		}
		n, brk, err := verifyChain(ctx, tx, h, batch)
		rep.RowsChecked += n
		if err != nil {
			return rep, err
		}
		if brk != nil {
			brk.TenantID = h.tenant
			rep.Broken = append(rep.Broken, *brk)
		}
	}
	rep.OK = len(rep.Broken) == 0
	return rep, nil
}

// chainHead is a chain as its head records it: where it ends and, if
// retention cut its beginning, where the kept part starts.
type chainHead struct {
	id, tenant string
	pos        chain.Position
	cut        *chain.Position
}

// loadHeads reads the head and the latest cut of every chain of tenant
// ("" = every tenant): one row per chain, small next to the rows.
func loadHeads(ctx context.Context, tx pgx.Tx, tenant string) ([]chainHead, error) {
	rows, err := tx.Query(ctx, `
		SELECT h.chain_id, h.tenant_id, h.seq, h.hash, c.last_seq, c.last_hash
		FROM audit_chain_heads h
		LEFT JOIN LATERAL (SELECT last_seq, last_hash FROM audit_chain_cuts c
			WHERE c.chain_id = h.chain_id ORDER BY last_seq DESC LIMIT 1) c ON true
		WHERE $1 = '' OR h.tenant_id = $1
		ORDER BY h.chain_id`, tenant)
	if err != nil {
		return nil, fmt.Errorf("audit: verify: %w", err)
	}
	heads, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (chainHead, error) {
		var h chainHead
		var cutSeq *int64
		var cutHash []byte
		if err := r.Scan(&h.id, &h.tenant, &h.pos.Seq, &h.pos.Hash, &cutSeq, &cutHash); err != nil {
			return h, err
		}
		if cutSeq != nil {
			h.cut = &chain.Position{Seq: *cutSeq, Hash: cutHash}
		}
		return h, nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: verify: %w", err)
	}
	return heads, nil
}

// verifyChain checks one chain: the rows retention kept from before its
// cut, then the linked rows from the cut (or the genesis) to the head, and
// that the chain ends at its head. It returns the rows checked and the
// first break (TenantID left to the caller), if any.
func verifyChain(ctx context.Context, tx pgx.Tx, h chainHead, batch int) (int64, *Break, error) {
	start := chain.Position{Seq: 0, Hash: chain.Genesis}
	var checked int64
	if h.cut != nil {
		start = *h.cut
		n, brk, err := verifyBeforeCut(ctx, tx, h.id, start.Seq, batch)
		checked += n
		if err != nil || brk != nil {
			return checked, brk, err
		}
	}
	pos := start
	n, brk, err := walk(ctx, tx, h.id, start.Seq, h.pos.Seq, batch, func(r chain.Row, stored []byte) (string, string) {
		next, reason, detail := chain.Check(pos, r, stored)
		pos = next
		return reason, detail
	})
	checked += n
	switch {
	case err != nil || brk != nil:
		return checked, brk, err
	case pos.Seq != h.pos.Seq:
		return checked, &Break{ChainID: h.id, Seq: pos.Seq + 1, Reason: chain.ReasonTruncated,
			Detail: fmt.Sprintf("the chain ends at seq %d but its head is seq %d: rows were removed", pos.Seq, h.pos.Seq)}, nil
	case !bytes.Equal(pos.Hash, h.pos.Hash):
		return checked, &Break{ChainID: h.id, Seq: pos.Seq, Reason: chain.ReasonHashMismatch,
			Detail: "the last row's hash differs from the recorded chain head"}, nil
	}
	return checked, nil, nil
}

// verifyBeforeCut checks the rows at or before a chain's cut that
// retention kept (their occurred_at put them in a newer partition): they
// can no longer be linked, so each must still match its own hash.
func verifyBeforeCut(ctx context.Context, tx pgx.Tx, chainID string, cutSeq int64, batch int) (int64, *Break, error) {
	return walk(ctx, tx, chainID, 0, cutSeq, batch, func(r chain.Row, stored []byte) (string, string) {
		if !bytes.Equal(chain.Hash(r), stored) {
			return chain.ReasonHashMismatch, "the row's contents do not match its hash: the row was altered"
		}
		return "", ""
	})
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
