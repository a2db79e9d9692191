package qstore

import (
	"context"
	"fmt"
	"time"
)

// PoolStep is a dispatch step ApplyDispatch ran for Pool.
type PoolStep struct {
	Pool string
	DispatchResult
}

// ApplyDispatch is Apply, followed in the same script call by a dispatch
// step of each pool of steps that the apply wakes (applydispatch.lua): a
// job submitted alone took two calls, its apply and the step its wake
// caused. The steps lease what is ready and leave the pool's
// housekeeping (silent workers, expired leases and not_after, dead letters
// to hand out again) to the loops' own steps, so their NextLease is only
// that of the leases they made. The result's Wake still names every pool
// the apply woke, stepped or not.
//
// A batch of more than one call's operations (MaxOpsPerCall) is applied
// as Apply does and runs no step: the calls of a big batch are pipelined,
// and the loops that their wake runs hand out what all of them made ready.
func (s *Store) ApplyDispatch(ctx context.Context, now time.Time, b *Batch, steps []DispatchParams) (ApplyResult, []PoolStep, error) {
	if len(steps) == 0 {
		res, err := s.Apply(ctx, now, b)
		return res, nil, err
	}
	var res ApplyResult
	if b.Len() == 0 {
		return res, nil, nil
	}
	chunks := b.chunks(s.applyHead(now, true), s.opts.MaxOpsPerCall)
	if len(chunks) != 1 {
		res, err := s.applyChunks(ctx, chunks)
		return res, nil, err
	}
	args := chunks[0]
	nApply := len(args)
	for _, p := range steps {
		args = append(args, s.dispatchArgs(p, false)...)
	}
	args = append(args, nApply)
	v, err := applyDispatchScript.call(ctx, s.rdb, args...).Slice()
	if err != nil {
		return res, nil, wrapErr("apply and dispatch", err)
	}
	stepped, err := decodeApplyDispatchReply(v, &res)
	if err != nil {
		return res, nil, fmt.Errorf("qstore: apply and dispatch: %w", err)
	}
	return res, stepped, nil
}

// decodeApplyDispatchReply decodes an apply_dispatch call's reply into res
// and the steps it ran: {apply reply, then per pool stepped: pool, its
// dispatch reply}.
func decodeApplyDispatchReply(v []any, res *ApplyResult) ([]PoolStep, error) {
	if len(v)%2 != 1 {
		return nil, errShortReply
	}
	applied, ok := v[0].([]any)
	if !ok {
		return nil, errShortReply
	}
	if err := decodeApplyReply(applied, res); err != nil {
		return nil, err
	}
	var steps []PoolStep
	for i := 1; i < len(v); i += 2 {
		reply, ok := v[i+1].([]any)
		if !ok {
			return steps, errShortReply
		}
		step, err := decodeDispatchReply(reply)
		if err != nil {
			return steps, err
		}
		steps = append(steps, PoolStep{Pool: str(v[i]), DispatchResult: step})
	}
	return steps, nil
}
