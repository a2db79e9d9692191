-- apply: applies a batch of lifecycle facts to the queue state atomically.
-- ARGV[1] key prefix, ARGV[2] now (ms), ARGV[3] lease (ms), ARGV[4] TTL of
-- terminal markers (s), ARGV[5] '1' to refuse to run when the epoch key is
-- missing (Redis lost its state: the scheduler must rebuild first), then
-- operations, each an op code, its argument count (checked against ARITY,
-- so a Go encoder and this script cannot drift apart silently) and its
-- arguments (the op structs of ops.go encode them). Returns {wake,
-- n_failed, failed templates (id + 8 fields)..., superseded (4 fields
-- each)...} (decoded by reply.go) where wake names the pools where something
-- may now be dispatchable (space-separated, '*' for every pool, '' for
-- none: wake_reply), failed templates are the failed attempts the Go side must
-- decide on, and superseded are jobs completed by an older dispatch while a
-- newer one was in flight (id, tenant, attempt, current dispatch id).
--
-- The helpers and ops below are defined once per library load (library.go);
-- apply_run is the call. What a call reads and builds lives in the locals
-- that follow, which apply_run sets afresh at the start of every call.
local argv -- this call's ARGV
local P, now, lease, ttl
local out, sup

-- The dispatch loops this call wakes (out[1], wake_reply): the pools where
-- a job may have become dispatchable or a slot was freed, or every pool
-- ('*') after a gate change, which may admit jobs of any pool. A dispatch
-- step costs Redis ~100 µs even when it finds nothing (docs/performance.md,
-- Round 19), so a loop is woken for its own pool only, and a freed slot
-- wakes it only when work is waiting there (wake_if_waiting).
local woken, wake_every, waiting_checked
local function wake(pool)
  if pool and pool ~= '' then woken[pool] = true else wake_every = true end
end

-- wake_if_waiting wakes pool when a tenant has ready work in it (its
-- active set, fair.lua, holds every tenant with a ready job): a slot freed
-- in a pool with nothing ready makes nothing dispatchable. Whatever makes
-- a job ready in this call wakes its pool itself, so one look per pool is
-- enough.
local function wake_if_waiting(pool)
  if not pool or woken[pool] or waiting_checked[pool] then return end
  waiting_checked[pool] = true
  if redis.call('EXISTS', P .. 'pool:' .. pool .. ':active') == 1 then woken[pool] = true end
end

local function wake_reply()
  if wake_every then return '*' end
  local pools = {}
  for pool in pairs(woken) do pools[#pools + 1] = pool end
  return table.concat(pools, ' ')
end

local function ready_key(q) return P .. 'q:' .. q .. ':ready' end
local function delayed_key(q) return P .. 'q:' .. q .. ':delayed' end
local function inflight_key(pool) return P .. 'pool:' .. pool .. ':inflight' end
local function held_key(pool) return P .. 'pool:' .. pool .. ':held' end

-- hold_lease moves an in-flight job to its pool's held set (leases of
-- attempts held outside Ferry's workers, which count against no worker
-- slot) with the lease deadline until, and marks it held (field held: the
-- job may be in the held set, so its completion removes it from there;
-- completions of jobs without the mark, nearly all, skip that command; a
-- done job is never dispatched again, so a held entry it might keep from
-- an older state only expires). Its tenant was charged
-- the estimate at dispatch; the time a receiver holds it takes no slot, so
-- no measured run time reconciles that charge (the est fields are emptied,
-- fair.lua).
local function hold_lease(jk, id, pool, until_ms)
  redis.call('ZREM', inflight_key(pool), id)
  redis.call('ZADD', held_key(pool), until_ms, id)
  redis.call('HSET', jk, 'est', '', 'cw', '', 'held', '1')
end

-- Ended leases and slots of this call, by pool and by tenant, written once
-- at its end (flush_ended): nothing in an apply call adds a job to a
-- lease set or a running set (dispatch does), so removing later is safe.
local ended_leases, ended_held, ended_runs
-- Set additions of the enqueues of this call (ready and delayed sets, by
-- key: score, id, score, id, ...), written once per set by flush_added
-- before any other op may read or remove from those sets: a run of fresh
-- enqueues costs two commands per job (its state read and its HSET).
local added
local function add_later(key, score, id)
  fair_push(added, key, score)
  fair_push(added, key, id)
end

local function flush_added()
  for k, args in pairs(added) do fair_bulk('ZADD', k, args) end
  added = {}
end
local function end_run(pool, t, id, held)
  fair_push(ended_leases, pool, id)
  if held then fair_push(ended_held, pool, id) end
  if t then fair_push(ended_runs, t, id) end
end

local function flush_ended()
  for pool, ids in pairs(ended_leases) do fair_bulk('ZREM', inflight_key(pool), ids) end
  for pool, ids in pairs(ended_held) do fair_bulk('ZREM', held_key(pool), ids) end
  for t, ids in pairs(ended_runs) do fair_bulk('SREM', P .. 'tenant:' .. t .. ':running', ids) end
  ended_leases, ended_held, ended_runs = {}, {}, {}
end

-- unindex takes a job out of every index it may be in. f holds the job's
-- state, pool, tenant, ck, gk, probe and held fields (nil: read them). A job in
-- flight without flow-control fields (the common completion) is only in
-- its pool's lease sets and its tenant's running set: then unindex returns
-- true (it freed a slot of f.pool and left no gate).
local function unindex(jk, id, f)
  if f and f.state == 'inflight' and (f.ck or '') == '' and (f.gk or '') == '' and (f.probe or '') == '' and f.pool then
    end_run(f.pool, f.tenant, id, f.held == '1')
    return true
  end
  fair_unindex(jk, id)
  route_unpark(jk, id)
  local g = redis.call('HMGET', jk, 'queue', 'pool', 'ck', 'gk', 'tenant', 'probe', 'type')
  if g[1] then
    redis.call('ZREM', ready_key(g[1]), id)
    redis.call('ZREM', delayed_key(g[1]), id)
  end
  if g[2] then
    redis.call('ZREM', inflight_key(g[2]), id)
    redis.call('ZREM', held_key(g[2]), id)
  end
  gate_leave(jk, id, g[3], g[4], g[5], g[6], g[7], now)
end

-- terminal replaces the job's hash by its terminal marker (state and
-- tenant) for the terminal TTL, in one command: a COPY of the marker
-- template of that state and tenant (P marker:<state>:<tenant>, written and
-- given the TTL once per script call), which brings the TTL along. The
-- marker is a fresh small hash: the job's own hash holds its spec (a
-- listpack of ~1 KB with the recommended hash-max-listpack-value, a hash
-- table of ~1.2 KB once a value is over it, and it stays one whatever its
-- fields are set to), kept for the terminal TTL (days); the copy is
-- listpack-encoded, ~100 bytes. Nothing reads a marker but its state
-- (every reader treats a missing field as absent).
local marker_written
local function terminal(jk, state, tenant)
  tenant = tenant or ''
  local tk = P .. 'marker:' .. state .. ':' .. tenant
  if not marker_written[tk] then
    if tenant ~= '' then
      redis.call('HSET', tk, 'state', state, 'tenant', tenant)
    else
      redis.call('HSET', tk, 'state', state)
    end
    redis.call('EXPIRE', tk, ttl)
    marker_written[tk] = true
  end
  redis.call('COPY', tk, jk, 'REPLACE')
end

local function template(jk, id)
  local f = redis.call('HMGET', jk, 'did', 'attempt', 'tenant', 'created', 'ready', 'spec', 'history', 'rf')
  out[#out + 1] = id
  for i = 1, 8 do out[#out + 1] = f[i] or '' end
  out[2] = out[2] + 1
end

-- Each op reads its arguments from ARGV[o], ARGV[o + 1], ... (o: the
-- first argument) in the order its comment gives, which is the order the
-- op's Go struct encodes them (ops.go).
local ops = {}

-- op_job is the job an op's first argument names: its id, hash key and state.
local function op_job(o)
  local id = argv[o]
  local jk = P .. 'job:' .. id
  return id, jk, redis.call('HGET', jk, 'state')
end

-- enqueue_hset writes every field of the attempt enqueued by op E at o in
-- one HSET, straight from ARGV (no table to build and unpack per job; the
-- attempt as its ARGV text, not a number for Redis to format): state, then
-- the arguments after it (the state's own fields and the concurrency
-- key's, ending with the spec). The order is the order of the fields in
-- the hash, a listpack (hash-max-listpack-value) that every field lookup
-- scans from its start: the fields read on every step come first, those
-- read only to build a dispatch after them, and the spec, the one long
-- value, last; est and cw start empty, so the dispatch that sets them
-- finds them early too. Interleaved with the old order in one process
-- (256-job batches): enqueue -5 %, a job's script time -2 to -4 %.
local function enqueue_hset(jk, o, state, ...)
  redis.call('HSET', jk, 'state', state, 'did', '', 'attempt', argv[o + 2], 'tenant', argv[o + 1],
    'pool', argv[o + 4], 'type', argv[o + 13], 'queue', argv[o + 3], 'est', '', 'cw', '', 'prio', argv[o + 5],
    'na', argv[o + 7], 'created', argv[o + 8], 'ready', argv[o + 9], 'tp', argv[o + 16],
    'history', argv[o + 11], 'rf', argv[o + 12], ...)
end

-- E id tenant attempt queue pool prio run_at_ms not_after_ms created ready spec history redriven_from type
--   concurrency_key concurrency_limit traceparent: an attempt is enqueued. A fresh job costs two
--   commands: its state read and one HSET of every field; its ready (or delayed) sets are
--   written once per call for every enqueue of the run (add_later). The retry of a failed
--   attempt costs three (its state read, PERSIST, the HSET): F (or B) took the failed job out
--   of every set it was in (its lease, slot and concurrency slot; a job in flight is in no
--   queue, gate or parking set), so it is not unindexed again, and the run of enqueues it is
--   part of is not split.
ops.E = function(o)
  local id, tenant, attempt = argv[o], argv[o + 1], tonumber(argv[o + 2])
  local q, pool, prio, run_at = argv[o + 3], argv[o + 4], argv[o + 5], tonumber(argv[o + 6])
  local jk = P .. 'job:' .. id
  local f = redis.call('HMGET', jk, 'state', 'attempt')
  local st, known = f[1], tonumber(f[2])
  if st == 'done' or st == 'cancelled' or st == 'dead' or (known and known >= attempt) then return end
  if st then
    if st ~= 'failed' then
      flush_added()
      unindex(jk, id)
      wake() -- it left its gates (gate_leave), which may admit jobs of any pool
    end
    redis.call('PERSIST', jk)
  end
  local tq = fair_tq(pool, q, tenant)
  local ck, spec = argv[o + 14], argv[o + 10]
  if run_at > now then
    if ck ~= '' then
      enqueue_hset(jk, o, 'delayed', 'ck', ck, 'cl', argv[o + 15], 'spec', spec)
    else
      enqueue_hset(jk, o, 'delayed', 'spec', spec)
    end
    add_later(delayed_key(q), run_at, id)
    add_later(tq .. ':delayed', run_at, id)
  else
    local seq = fair_seq()
    local score = fair_score(prio, seq, false)
    if ck ~= '' then
      enqueue_hset(jk, o, 'ready', 'seq', seq, 'ck', ck, 'cl', argv[o + 15], 'spec', spec)
    else
      enqueue_hset(jk, o, 'ready', 'seq', seq, 'spec', spec)
    end
    -- unindex took it out of its delayed sets already.
    add_later(ready_key(q), score, id)
    add_later(tq, score, id)
    fair_activate(pool, tenant)
  end
  fair_index(pool, q, tenant)
  wake(pool)
end

-- S id dispatch_id hold_ms: started/progress extend the current
-- dispatch's lease. hold_ms > 0 says the attempt is held outside Ferry's
-- workers (an async http job): it moves to the pool's held set, where it
-- holds no worker slot, with a lease of hold_ms.
ops.S = function(o)
  local id = argv[o]
  local jk = P .. 'job:' .. id
  local f = redis.call('HMGET', jk, 'state', 'did', 'pool')
  if f[2] == argv[o + 1] and (f[1] == 'inflight' or f[1] == 'cancelled') then
    local hold = tonumber(argv[o + 2]) or 0
    if hold > 0 then
      hold_lease(jk, id, f[3], now + hold)
    else
      redis.call('ZADD', inflight_key(f[3]), 'XX', now + lease, id)
    end
  end
end

-- C id tenant dispatch_id started_ms finished_ms: completed; terminal,
-- frees the slot, never dispatched again. A completion by another dispatch
-- than the one in flight (a late report after the lease expired) still
-- wins; the copy in flight is reported as superseded so it can be told to
-- stop. started_ms and finished_ms (0 when unknown) are the measured run,
-- which reconciles its slot-time (fair.lua) as a U op would. A job in
-- flight without flow-control fields costs two commands: its fields read,
-- and the terminal marker's COPY.
ops.C = function(o)
  local id, tenant, did = argv[o], argv[o + 1], argv[o + 2]
  local jk = P .. 'job:' .. id
  local v = redis.call('HMGET', jk, 'state', 'did', 'tenant', 'attempt', 'probe', 'type', 'pool', 'ck', 'gk', 'est', 'cw',
    'held')
  local f = {state = v[1], did = v[2], tenant = v[3], attempt = v[4], probe = v[5], type = v[6], pool = v[7],
    ck = v[8], gk = v[9], est = v[10], cw = v[11], held = v[12]}
  if f.state == 'done' then return end
  fair_settle(jk, did, tonumber(argv[o + 3]) or 0, tonumber(argv[o + 4]) or 0, f)
  local probe = f.probe == '1' -- a breaker's probe: its success may close the breaker
  if f.probe == '1' and f.tenant then
    gate_succeeded(jk, f.tenant, f.type or '', now)
    f.probe = nil -- gate_succeeded dropped the probe mark
  end
  if f.state == 'inflight' and f.did and f.did ~= '' and did ~= '' and f.did ~= did then
    sup[#sup + 1] = id
    sup[#sup + 1] = f.tenant or tenant
    sup[#sup + 1] = f.attempt or '0'
    sup[#sup + 1] = f.did
  end
  if f.state then
    if unindex(jk, id, f) and not probe then wake_if_waiting(f.pool) else wake() end
  end
  terminal(jk, 'done', tenant)
end

-- F id dispatch_id class started_ms finished_ms: the current dispatch
-- failed. started_ms and finished_ms (0 when unknown) are the measured
-- run, which reconciles its slot-time (fair.lua) as a U op would. Its lease
-- and slot are given up at the end of the call with the completions'
-- (end_run); a failure left for a decision empties the charge (est, cw) in
-- the HSET of its state, so a job failing in flight without flow-control
-- fields costs four commands: its fields read, that HSET, its EXPIRE and
-- its template's read.
ops.F = function(o)
  local id, did, class = argv[o], argv[o + 1], argv[o + 2]
  local jk = P .. 'job:' .. id
  local v = redis.call('HMGET', jk, 'state', 'did', 'pool', 'tenant', 'type', 'probe', 'ck', 'est', 'cw')
  local st = v[1]
  if not st or v[2] ~= did or did == '' then return end
  if st == 'inflight' or st == 'cancelled' then
    local f = {did = v[2], pool = v[3], tenant = v[4], type = v[5], est = v[8], cw = v[9]}
    fair_settle(jk, did, tonumber(argv[o + 3]) or 0, tonumber(argv[o + 4]) or 0, f)
    -- Unconditionally out of the held set (held: true): a job that runs
    -- again must not keep a held lease from a state written before the
    -- held mark existed.
    end_run(f.pool, f.tenant, id, true)
    if class ~= 'worker_lost' then gate_run_failed(jk, id, did, class, f.tenant, f.type, v[6], v[7], now) end
    if class == 'worker_lost' then
      wake(f.pool) -- it is ready again, below
    elseif v[6] == '1' or (v[7] or '') ~= '' then
      wake() -- its concurrency slot or probe was given up (gate_run_failed)
    else
      wake_if_waiting(f.pool)
    end
    if st == 'cancelled' or class == 'cancelled' then
      terminal(jk, 'cancelled', f.tenant)
    elseif class == 'worker_lost' then
      redis.call('HSET', jk, 'est', '', 'cw', '')
      fair_make_ready(jk, id, true, nil, false)
    else
      redis.call('HSET', jk, 'state', 'failed', 'est', '', 'cw', '')
      redis.call('EXPIRE', jk, ttl)
      template(jk, id)
    end
  elseif st == 'failed' then
    template(jk, id) -- a replay: decide again, the outcome is idempotent
  end
end

-- X id tenant: cancelled.
ops.X = function(o)
  local id, jk, st = op_job(o)
  if st == 'inflight' then
    -- Keep the slot until the worker reports or the lease runs out.
    redis.call('HSET', jk, 'state', 'cancelled', 'spec', '', 'history', '', 'rf', '')
    redis.call('EXPIRE', jk, ttl)
  elseif st ~= 'done' and st ~= 'cancelled' then
    if st then unindex(jk, id) end
    terminal(jk, 'cancelled', argv[o + 1])
  end
end

-- W pool worker slots expires_ms stopping routing (JSON, '' when none) hold
ops.W = function(o)
  local pool, w = argv[o], argv[o + 1]
  local pp = P .. 'pool:' .. pool
  local wz, wh, holds = pp .. ':workers', pp .. ':slots', pp .. ':holds'
  local exp = tonumber(argv[o + 3])
  if argv[o + 4] == '1' then
    redis.call('ZREM', wz, w)
    redis.call('HDEL', wh, w)
    redis.call('HDEL', holds, w)
    route_forget(pool, w)
  elseif exp > now then
    redis.call('ZADD', wz, 'GT', exp, w)
    -- ZADD GT refuses an older announcement; only then take its slots.
    if tonumber(redis.call('ZSCORE', wz, w)) == exp then
      redis.call('HSET', wh, w, argv[o + 2])
      if (tonumber(argv[o + 6]) or 0) > 0 then
        redis.call('HSET', holds, w, argv[o + 6])
      else
        redis.call('HDEL', holds, w)
      end
      route_set(pool, w, argv[o + 5])
    end
    wake(pool)
  end
end

-- requeue_lost puts an in-flight job back at the front of its queue when
-- match(f) holds for its state, attempt, did and pool fields.
local function requeue_lost(id, match)
  local jk = P .. 'job:' .. id
  local f = redis.call('HMGET', jk, 'state', 'attempt', 'did', 'pool')
  if f[1] == 'inflight' and match(f) then
    redis.call('ZREM', inflight_key(f[4]), id)
    fair_unrun(jk, id)
    fair_make_ready(jk, id, true, nil, false)
    wake(f[4])
  end
end

-- H id attempt: handed back by a stopping worker.
ops.H = function(o)
  requeue_lost(argv[o], function(f) return tonumber(f[2]) == tonumber(argv[o + 1]) end)
end

-- R id dispatch_id: the dispatch record could not be produced.
ops.R = function(o)
  requeue_lost(argv[o], function(f) return f[3] == argv[o + 1] end)
end

-- D id tenant: dead-lettered (rebuild only): a terminal marker.
ops.D = function(o)
  local id, jk, st = op_job(o)
  if st ~= 'done' and st ~= 'cancelled' and st ~= 'dead' then
    if st then unindex(jk, id) end
    terminal(jk, 'dead', argv[o + 1])
  end
end

-- B id dispatch_id (rebuild only): the job's latest attempt failed and
-- its retry decision is not in the log: mark it failed (as F would) and
-- return its template for the decision.
ops.B = function(o)
  local id, jk, st = op_job(o)
  if st and st ~= 'done' and st ~= 'cancelled' and st ~= 'dead' then
    unindex(jk, id)
    redis.call('HSET', jk, 'state', 'failed', 'did', argv[o + 1])
    redis.call('EXPIRE', jk, ttl)
    template(jk, id)
  end
end

-- A pool id: the dlq record of an expired job was produced.
ops.A = function(o)
  local id = argv[o + 1]
  local jk = P .. 'job:' .. id
  redis.call('ZREM', P .. 'pool:' .. argv[o] .. ':outbox', id)
  local f = redis.call('HMGET', jk, 'state', 'tenant')
  if f[1] == 'expiring' then terminal(jk, 'dead', f[2]) end
end

-- U id dispatch_id started_ms finished_ms: the measured run of a
-- dispatch (before its C or F): reconcile its slot-time (fair.lua).
ops.U = function(o)
  fair_settle(P .. 'job:' .. argv[o], argv[o + 1], tonumber(argv[o + 2]) or 0, tonumber(argv[o + 3]) or 0)
end

-- T id attempt traceparent: the trace of the enqueued attempt (after its E;
-- an E carries it itself when both are in one batch).
ops.T = function(o)
  local jk = P .. 'job:' .. argv[o]
  if tonumber(redis.call('HGET', jk, 'attempt')) == tonumber(argv[o + 1]) then
    redis.call('HSET', jk, 'tp', argv[o + 2])
  end
end

-- ARITY is each op's argument count.
local ARITY = {E = 17, S = 3, C = 5, F = 5, X = 2, W = 7, H = 2, R = 2, D = 2, B = 2, A = 2, U = 4, T = 3}

-- apply_run applies the operations of one call (a: its ARGV; the
-- operations end at a[last], by default at its end: apply_dispatch_run
-- passes more after them).
local function apply_run(a, last)
  argv, P = a, a[1]
  last = last or #a
  fair_begin(P)
  gate_begin(P)
  route_begin(P)
  now, lease, ttl = tonumber(a[2]), tonumber(a[3]), tonumber(a[4])
  out, sup = {'', 0}, {}
  woken, wake_every, waiting_checked = {}, false, {}
  ended_leases, ended_held, ended_runs = {}, {}, {}
  added, marker_written = {}, {}
  if a[5] == '1' and redis.call('EXISTS', P .. 'epoch') == 0 then
    return redis.error_reply('NOEPOCH scheduler state lost; rebuild required')
  end
  local i = 6
  while i <= last do
    local op, n = argv[i], tonumber(argv[i + 1])
    local fn = ops[op]
    if not fn then return redis.error_reply('qstore: unknown op ' .. tostring(op)) end
    if n ~= ARITY[op] or i + 1 + n > last then
      return redis.error_reply('qstore: op ' .. op .. ' takes ' .. ARITY[op] .. ' arguments, got ' .. tostring(argv[i + 1]))
    end
    -- Only enqueues (and their traces) leave the sets they add to pending.
    if op ~= 'E' and op ~= 'T' then flush_added() end
    fn(i + 2)
    i = i + 2 + n
  end
  flush_added()
  flush_ended()
  fair_flush()
  out[1] = wake_reply()
  for _, v in ipairs(sup) do out[#out + 1] = v end
  return out
end
