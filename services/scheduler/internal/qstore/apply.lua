-- apply: applies a batch of lifecycle facts to the queue state atomically.
-- ARGV[1] key prefix, ARGV[2] now (ms), ARGV[3] lease (ms), ARGV[4] TTL of
-- terminal markers (s), ARGV[5] '1' to refuse to run when the epoch key is
-- missing (Redis lost its state: the scheduler must rebuild first), then
-- operations, each an op code followed by a fixed number of arguments (see
-- qstore.go). Returns {wake, n_failed, failed templates (id + 8 fields)...,
-- superseded (4 fields each)...} where wake is 1 when something may now be
-- dispatchable, failed templates are the failed attempts the Go side must
-- decide on, and superseded are jobs completed by an older dispatch while a
-- newer one was in flight (id, tenant, attempt, current dispatch id).
local P = ARGV[1]
local now = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
if ARGV[5] == '1' and redis.call('EXISTS', P .. 'epoch') == 0 then
  return redis.error_reply('NOEPOCH scheduler state lost; rebuild required')
end
local STEP, NORMAL = 1e14, 5e13
local out = {0, 0}
local sup = {}

local function ready_key(q) return P .. 'q:' .. q .. ':ready' end
local function delayed_key(q) return P .. 'q:' .. q .. ':delayed' end
local function inflight_key(pool) return P .. 'pool:' .. pool .. ':inflight' end
local function held_key(pool) return P .. 'pool:' .. pool .. ':held' end

-- hold_lease moves an in-flight job to its pool's held set (leases of
-- attempts held outside Ferry's workers, which count against no worker
-- slot) with the lease deadline until. Its tenant was charged the estimate
-- at dispatch; the time a receiver holds it takes no slot, so no measured
-- run time reconciles that charge (the est fields go, fair.lua).
local function hold_lease(jk, id, pool, until_ms)
  redis.call('ZREM', inflight_key(pool), id)
  redis.call('ZADD', held_key(pool), until_ms, id)
  redis.call('HDEL', jk, 'est', 'cw')
end

-- make_ready puts a job in its queue's ready set: at the back of its
-- priority (a fresh FIFO sequence), or at the front (its old sequence in
-- the front band) for a job whose run was lost.
local function make_ready(jk, id, front)
  local f = redis.call('HMGET', jk, 'queue', 'prio', 'seq')
  local seq = tonumber(f[3])
  if not front or not seq then
    seq = redis.call('INCR', P .. 'seq')
  end
  local score = tonumber(f[2]) * STEP + seq
  if not front then score = score + NORMAL end
  redis.call('ZADD', ready_key(f[1]), score, id)
  redis.call('HSET', jk, 'state', 'ready', 'seq', seq, 'did', '')
  fair_ready(jk, id, score)
end

local function unindex(jk, id)
  fair_unindex(jk, id)
  route_unpark(jk, id)
  local f = redis.call('HMGET', jk, 'queue', 'pool', 'ck', 'gk', 'tenant', 'probe', 'type')
  if f[1] then
    redis.call('ZREM', ready_key(f[1]), id)
    redis.call('ZREM', delayed_key(f[1]), id)
  end
  if f[2] then
    redis.call('ZREM', inflight_key(f[2]), id)
    redis.call('ZREM', held_key(f[2]), id)
  end
  gate_leave(jk, id, f[3], f[4], f[5], f[6], f[7], now)
end

local function terminal(jk, state, tenant)
  redis.call('HSET', jk, 'state', state, 'did', '')
  if tenant and tenant ~= '' then redis.call('HSET', jk, 'tenant', tenant) end
  redis.call('HDEL', jk, 'spec', 'history', 'rf')
  redis.call('EXPIRE', jk, ttl)
end

local function template(jk, id)
  local f = redis.call('HMGET', jk, 'did', 'attempt', 'tenant', 'created', 'ready', 'spec', 'history', 'rf')
  out[#out + 1] = id
  for i = 1, 8 do out[#out + 1] = f[i] or '' end
  out[2] = out[2] + 1
end

local i = 6
while i <= #ARGV do
  local op = ARGV[i]
  if op == 'E' then
    -- E id tenant attempt queue pool prio run_at_ms not_after_ms created ready spec history redriven_from type
    --   concurrency_key concurrency_limit
    local id, tenant, attempt = ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
    local q, pool, prio, run_at = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], tonumber(ARGV[i + 7])
    local jk = P .. 'job:' .. id
    local f = redis.call('HMGET', jk, 'state', 'attempt')
    local st, known = f[1], tonumber(f[2])
    if st ~= 'done' and st ~= 'cancelled' and st ~= 'dead' and not (known and known >= attempt) then
      if st then unindex(jk, id) end
      redis.call('PERSIST', jk)
      redis.call('HSET', jk, 'tenant', tenant, 'attempt', attempt, 'queue', q, 'pool', pool, 'prio', prio,
        'na', ARGV[i + 8], 'created', ARGV[i + 9], 'ready', ARGV[i + 10], 'spec', ARGV[i + 11],
        'history', ARGV[i + 12], 'rf', ARGV[i + 13], 'did', '', 'type', ARGV[i + 14])
      if ARGV[i + 15] ~= '' then redis.call('HSET', jk, 'ck', ARGV[i + 15], 'cl', ARGV[i + 16]) end
      redis.call('SADD', P .. 'pool:' .. pool .. ':queues', q)
      if run_at > now then
        redis.call('ZADD', delayed_key(q), run_at, id)
        redis.call('HSET', jk, 'state', 'delayed')
        fair_delayed(jk, id, run_at)
      else
        make_ready(jk, id, false)
      end
      out[1] = 1
    end
    i = i + 17
  elseif op == 'S' then
    -- S id dispatch_id hold_ms: started/progress extend the current
    -- dispatch's lease. hold_ms > 0 says the attempt is held outside Ferry's
    -- workers (an async http job): it moves to the pool's held set, where it
    -- holds no worker slot, with a lease of hold_ms.
    local id = ARGV[i + 1]
    local jk = P .. 'job:' .. id
    local f = redis.call('HMGET', jk, 'state', 'did', 'pool')
    if f[2] == ARGV[i + 2] and (f[1] == 'inflight' or f[1] == 'cancelled') then
      local hold = tonumber(ARGV[i + 3]) or 0
      if hold > 0 then
        hold_lease(jk, id, f[3], now + hold)
      else
        redis.call('ZADD', inflight_key(f[3]), 'XX', now + lease, id)
      end
    end
    i = i + 4
  elseif op == 'C' then
    -- C id tenant dispatch_id: completed; terminal, frees the slot, never
    -- dispatched again. A completion by another dispatch than the one in
    -- flight (a late report after the lease expired) still wins; the copy in
    -- flight is reported as superseded so it can be told to stop.
    local id, did = ARGV[i + 1], ARGV[i + 3]
    local jk = P .. 'job:' .. id
    local f = redis.call('HMGET', jk, 'state', 'did', 'tenant', 'attempt', 'probe', 'type')
    local st = f[1]
    if st ~= 'done' then
      if f[5] == '1' and f[3] then gate_succeeded(jk, f[3], f[6] or '', now) end
      if st == 'inflight' and f[2] and f[2] ~= '' and did ~= '' and f[2] ~= did then
        sup[#sup + 1] = id
        sup[#sup + 1] = f[3] or ARGV[i + 2]
        sup[#sup + 1] = f[4] or '0'
        sup[#sup + 1] = f[2]
      end
      if st then unindex(jk, id) end
      terminal(jk, 'done', ARGV[i + 2])
      out[1] = 1
    end
    i = i + 4
  elseif op == 'F' then
    -- F id dispatch_id class
    local id, did, class = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    local jk = P .. 'job:' .. id
    local f = redis.call('HMGET', jk, 'state', 'did', 'pool', 'tenant', 'type', 'probe', 'ck')
    local st = f[1]
    if st and f[2] == did and did ~= '' then
      if st == 'inflight' or st == 'cancelled' then
        redis.call('ZREM', inflight_key(f[3]), id)
        redis.call('ZREM', held_key(f[3]), id)
        fair_unrun(jk, id)
        if class ~= 'worker_lost' then gate_run_failed(jk, id, did, class, f[4], f[5], f[6], f[7], now) end
        out[1] = 1
        if st == 'cancelled' or class == 'cancelled' then
          terminal(jk, 'cancelled')
        elseif class == 'worker_lost' then
          make_ready(jk, id, true)
        else
          redis.call('HSET', jk, 'state', 'failed')
          redis.call('EXPIRE', jk, ttl)
          template(jk, id)
        end
      elseif st == 'failed' then
        template(jk, id) -- a replay: decide again, the outcome is idempotent
      end
    end
    i = i + 4
  elseif op == 'X' then
    -- X id tenant: cancelled.
    local id = ARGV[i + 1]
    local jk = P .. 'job:' .. id
    local st = redis.call('HGET', jk, 'state')
    if st == 'inflight' then
      -- Keep the slot until the worker reports or the lease runs out.
      redis.call('HSET', jk, 'state', 'cancelled')
      redis.call('HDEL', jk, 'spec', 'history', 'rf')
      redis.call('EXPIRE', jk, ttl)
    elseif st ~= 'done' and st ~= 'cancelled' then
      if st then unindex(jk, id) end
      terminal(jk, 'cancelled', ARGV[i + 2])
    end
    i = i + 3
  elseif op == 'W' then
    -- W pool worker slots expires_ms stopping routing (JSON, '' when none)
    local pool, w = ARGV[i + 1], ARGV[i + 2]
    local wz, wh = P .. 'pool:' .. pool .. ':workers', P .. 'pool:' .. pool .. ':slots'
    local exp = tonumber(ARGV[i + 4])
    if ARGV[i + 5] == '1' then
      redis.call('ZREM', wz, w)
      redis.call('HDEL', wh, w)
      route_forget(pool, w)
    elseif exp > now then
      redis.call('ZADD', wz, 'GT', exp, w)
      -- ZADD GT refuses an older announcement; only then take its slots.
      if tonumber(redis.call('ZSCORE', wz, w)) == exp then
        redis.call('HSET', wh, w, ARGV[i + 3])
        route_set(pool, w, ARGV[i + 6])
      end
      out[1] = 1
    end
    i = i + 7
  elseif op == 'H' or op == 'R' then
    -- H id attempt: handed back by a stopping worker.
    -- R id dispatch_id: the dispatch record could not be produced.
    local id = ARGV[i + 1]
    local jk = P .. 'job:' .. id
    local f = redis.call('HMGET', jk, 'state', 'attempt', 'did', 'pool')
    local match
    if op == 'H' then match = tonumber(f[2]) == tonumber(ARGV[i + 2]) else match = f[3] == ARGV[i + 2] end
    if f[1] == 'inflight' and match then
      redis.call('ZREM', inflight_key(f[4]), id)
      fair_unrun(jk, id)
      make_ready(jk, id, true)
      out[1] = 1
    end
    i = i + 3
  elseif op == 'D' then
    -- D id tenant: dead-lettered (rebuild only): a terminal marker.
    local id = ARGV[i + 1]
    local jk = P .. 'job:' .. id
    local st = redis.call('HGET', jk, 'state')
    if st ~= 'done' and st ~= 'cancelled' and st ~= 'dead' then
      if st then unindex(jk, id) end
      terminal(jk, 'dead', ARGV[i + 2])
    end
    i = i + 3
  elseif op == 'B' then
    -- B id dispatch_id (rebuild only): the job's latest attempt failed and
    -- its retry decision is not in the log: mark it failed (as F would) and
    -- return its template for the decision.
    local id = ARGV[i + 1]
    local jk = P .. 'job:' .. id
    local st = redis.call('HGET', jk, 'state')
    if st and st ~= 'done' and st ~= 'cancelled' and st ~= 'dead' then
      unindex(jk, id)
      redis.call('HSET', jk, 'state', 'failed', 'did', ARGV[i + 2])
      redis.call('EXPIRE', jk, ttl)
      template(jk, id)
    end
    i = i + 3
  elseif op == 'A' then
    -- A pool id: the dlq record of an expired job was produced.
    local id = ARGV[i + 2]
    local jk = P .. 'job:' .. id
    redis.call('ZREM', P .. 'pool:' .. ARGV[i + 1] .. ':outbox', id)
    if redis.call('HGET', jk, 'state') == 'expiring' then terminal(jk, 'dead') end
    i = i + 3
  elseif op == 'U' then
    -- U id dispatch_id started_ms finished_ms: the measured run of a
    -- dispatch (before its C or F): reconcile its slot-time (fair.lua).
    fair_settle(P .. 'job:' .. ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]) or 0, tonumber(ARGV[i + 4]) or 0)
    i = i + 5
  elseif op == 'T' then
    -- T id attempt traceparent: the trace of the enqueued attempt (after its E).
    local jk = P .. 'job:' .. ARGV[i + 1]
    if tonumber(redis.call('HGET', jk, 'attempt')) == tonumber(ARGV[i + 2]) then
      redis.call('HSET', jk, 'tp', ARGV[i + 3])
    end
    i = i + 4
  else
    return redis.error_reply('qstore: unknown op ' .. tostring(op))
  end
end
for _, v in ipairs(sup) do out[#out + 1] = v end
return out
