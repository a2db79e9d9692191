-- fair: helpers of the weighted fair share across tenants, prepended to
-- apply.lua and dispatch.lua (both take the key prefix as ARGV[1]). The key
-- layout and the model are described in fair.go and docs/tenancy.md.
--
-- The helpers are defined once per library load when the scripts run as
-- Redis functions (library.go), so nothing here may read ARGV or call
-- Redis at load time, and the per-call state below lives in locals that
-- fair_begin sets afresh at the start of every call.
local FP
-- FAIR_ALPHA is the weight of the newest measured duration in the EWMA of
-- a (tenant, job type)'s run time.
local FAIR_ALPHA = 0.2
-- FAIR_STEP and FAIR_NORMAL make a ready score: prio·FAIR_STEP + seq, plus
-- FAIR_NORMAL unless the job goes in the front band (a lost run re-queued).
local FAIR_STEP, FAIR_NORMAL = 1e14, 5e13
-- FAIR_SEQ_BLOCK is how many FIFO sequence numbers a script call reserves
-- at once (fair_seq): one INCRBY per block instead of an INCR per job.
-- Small, because a call's unused numbers are skipped and seq must stay
-- below FAIR_NORMAL (5e13): at 100 reserving calls a second, 240 years.
local FAIR_SEQ_BLOCK = 64

-- What this script call already did or read, so a batch of jobs of one
-- tenant and queue pays the index, activation and estimate commands once.
-- An entry is dropped where a script undoes what it records
-- (fair_deactivate); settlements are written once, by fair_flush (the
-- virtual times' earlier when a tenant activates: fair_activate).
local fair_indexed, fair_active_seen
local fair_seq_next, fair_seq_last
local fair_est, fair_est_dirty
local fair_vt_delta

-- fair_begin starts a script call over key prefix p with nothing done or
-- read yet.
local function fair_begin(p)
  FP = p
  fair_indexed, fair_active_seen = {}, {}
  fair_seq_next, fair_seq_last = 1, 0
  fair_est, fair_est_dirty = {}, {}
  fair_vt_delta = {}
end

-- fair_bulk runs cmd on key with args (members, or score-member pairs)
-- in one command per 1,000 arguments: a batch of jobs costs one command,
-- and unpack stays far below Lua's stack limit.
local function fair_bulk(cmd, key, args)
  for a = 1, #args, 1000 do
    redis.call(cmd, key, unpack(args, a, math.min(a + 999, #args)))
  end
end

-- zfirst is the score of sorted set k's first member, false when k is
-- empty: the one read of a set's next due time (dispatch.lua, gates.lua).
local function zfirst(k)
  local r = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  if #r > 0 then return tonumber(r[2]) end
  return false
end

-- fair_push appends v to the list m[k], creating it: the per-key lists a
-- script call writes once at its end.
local function fair_push(m, k, v)
  local l = m[k]
  if not l then
    l = {}
    m[k] = l
  end
  l[#l + 1] = v
end

-- fair_tq is the ready set of tenant t in queue q of pool.
local function fair_tq(pool, q, t) return FP .. 'pool:' .. pool .. ':q:' .. q .. ':t:' .. t end

-- fair_seq is the next FIFO sequence number. Blocks are reserved from
-- P seq, which only grows, and script calls run one at a time, so numbers
-- keep the order in which jobs became ready; a block's unused numbers are
-- skipped (only the order matters).
local function fair_seq()
  if fair_seq_next > fair_seq_last then
    fair_seq_last = redis.call('INCRBY', FP .. 'seq', FAIR_SEQ_BLOCK)
    fair_seq_next = fair_seq_last - FAIR_SEQ_BLOCK + 1
  end
  local s = fair_seq_next
  fair_seq_next = s + 1
  return s
end

-- fair_flush_vt writes the virtual-time settlements (fair_settle) of this
-- script call so far: each tenant's virtual time once.
local function fair_flush_vt()
  for m, d in pairs(fair_vt_delta) do
    local sp = string.find(m, '\n', 1, true)
    local pool, t = string.sub(m, 1, sp - 1), string.sub(m, sp + 1)
    local vt = tonumber(redis.call('HINCRBYFLOAT', FP .. 'pool:' .. pool .. ':vt', t, string.format('%.6f', d)))
    redis.call('ZADD', FP .. 'pool:' .. pool .. ':active', 'XX', vt, t)
  end
  fair_vt_delta = {}
end

-- fair_activate puts tenant t among the pool's tenants with ready work, at
-- its virtual time, but never behind the pool's virtual now nor behind
-- every tenant already active: a tenant that was idle cannot bank credit.
-- The virtual now is the start of the last pick, and the running tenants'
-- settlements since (runs longer than charged) moved their virtual times
-- past it; that use is theirs, not credit for the arriving tenant, so the
-- settlements of this call are written first and it starts no lower than
-- the lowest of them.
local function fair_activate(pool, t)
  local m = pool .. '\n' .. t
  if fair_active_seen[m] then return end
  fair_active_seen[m] = true
  local ak = FP .. 'pool:' .. pool .. ':active'
  if redis.call('ZSCORE', ak, t) then return end
  if next(fair_vt_delta) then fair_flush_vt() end
  local vk = FP .. 'pool:' .. pool .. ':vt'
  local vt = tonumber(redis.call('HGET', vk, t)) or 0
  local floor = tonumber(redis.call('GET', FP .. 'pool:' .. pool .. ':vnow')) or 0
  local lowest = redis.call('ZRANGE', ak, 0, 0, 'WITHSCORES')[2]
  if lowest then floor = math.max(floor, tonumber(lowest)) end
  if vt < floor then
    vt = floor
    redis.call('HSET', vk, t, vt)
  end
  redis.call('ZADD', ak, vt, t)
end

-- fair_deactivate takes tenant t out of the pool's active set (dispatch
-- found no ready job it may run).
local function fair_deactivate(pool, t)
  redis.call('ZREM', FP .. 'pool:' .. pool .. ':active', t)
  fair_active_seen[pool .. '\n' .. t] = nil
end

-- fair_index lists queue q among the pool's queues and tenant t's queues
-- of the pool. Every path that makes a job ready or delayed comes through
-- here, so prune.lua may drop a queue from both sets once it stays empty:
-- the sets stay as small as the live queues.
local function fair_index(pool, q, t)
  local m = pool .. '\n' .. q .. '\n' .. t
  if fair_indexed[m] then return end
  fair_indexed[m] = true
  redis.call('SADD', FP .. 'pool:' .. pool .. ':queues', q)
  redis.call('SADD', FP .. 'pool:' .. pool .. ':tq:' .. t, q)
end

-- fair_job reads what indexing job jk needs of it.
local function fair_job(jk)
  local f = redis.call('HMGET', jk, 'pool', 'queue', 'tenant', 'prio', 'seq')
  return {pool = f[1] or 'short', queue = f[2] or 'default', tenant = f[3] or '', prio = f[4], seq = f[5]}
end

-- fair_index_ready indexes a ready job j (fair_job's fields; already in its
-- queue's ready set with score) in its tenant's ready set and activates the
-- tenant; from_delayed says it may still be in the tenant's delayed set.
local function fair_index_ready(j, id, score, from_delayed)
  local k = fair_tq(j.pool, j.queue, j.tenant)
  redis.call('ZADD', k, score, id)
  if from_delayed then redis.call('ZREM', k .. ':delayed', id) end
  fair_index(j.pool, j.queue, j.tenant)
  fair_activate(j.pool, j.tenant)
end

-- fair_ready indexes a ready job (already in its queue's ready set with
-- score) in its tenant's ready set and activates the tenant.
local function fair_ready(jk, id, score)
  fair_index_ready(fair_job(jk), id, score, true)
end

-- fair_score is the ready score of a job of priority prio with FIFO
-- sequence seq, in the front band or not.
local function fair_score(prio, seq, front)
  local score = tonumber(prio) * FAIR_STEP + seq
  if not front then score = score + FAIR_NORMAL end
  return score
end

-- fair_make_ready puts a job in its queue's ready set and its tenant's: at
-- the back of its priority (a fresh FIFO sequence), or at the front (its
-- old sequence in the front band) for a job whose run was lost. j holds
-- fair_job's fields (nil: read them); from_delayed as for fair_index_ready.
local function fair_make_ready(jk, id, front, j, from_delayed)
  j = j or fair_job(jk)
  local seq = tonumber(j.seq)
  if not front or not seq then seq = fair_seq() end
  local score = fair_score(j.prio, seq, front)
  redis.call('ZADD', FP .. 'q:' .. j.queue .. ':ready', score, id)
  redis.call('HSET', jk, 'state', 'ready', 'seq', seq, 'did', '')
  fair_index_ready(j, id, score, from_delayed)
end

-- fair_delayed indexes a delayed job j (fair_job's pool, queue and tenant)
-- in its tenant's delayed set (for the per-tenant queue listing).
local function fair_delayed(j, id, due)
  redis.call('ZADD', fair_tq(j.pool, j.queue, j.tenant) .. ':delayed', due, id)
  fair_index(j.pool, j.queue, j.tenant)
end

-- fair_unindex removes a job from its tenant's sets (ready, delayed, running).
local function fair_unindex(jk, id)
  local f = redis.call('HMGET', jk, 'pool', 'queue', 'tenant')
  if f[1] and f[2] and f[3] then
    local k = fair_tq(f[1], f[2], f[3])
    redis.call('ZREM', k, id)
    redis.call('ZREM', k .. ':delayed', id)
  end
  if f[3] then redis.call('SREM', FP .. 'tenant:' .. f[3] .. ':running', id) end
end

-- fair_unrun: the job of tenant t (nil: read it) no longer holds a slot of
-- its tenant.
local function fair_unrun(jk, id, t)
  t = t or redis.call('HGET', jk, 'tenant')
  if t then redis.call('SREM', FP .. 'tenant:' .. t .. ':running', id) end
end

-- FAIR_TYPE_FIELD prefixes a type's field in P est: the EWMA of that
-- type's jobs across tenants. '*' is in no tenant id (docs/tenancy.md).
local FAIR_TYPE_FIELD = '*|'

-- fair_estimates are the run-time estimates (ms) of tenant t's jobs of
-- type typ and of the type's jobs across tenants (nil where none was
-- measured), with their fields: read in one HMGET per script call and
-- (tenant, type), and cached with what the call learns.
local function fair_estimates(t, typ)
  local field, tfield = t .. '|' .. (typ or ''), FAIR_TYPE_FIELD .. (typ or '')
  if fair_est[field] == nil then
    local v = redis.call('HMGET', FP .. 'est', field, tfield)
    fair_est[field] = tonumber(v[1]) or false
    if fair_est[tfield] == nil then fair_est[tfield] = tonumber(v[2]) or false end
  end
  return fair_est[field] or nil, field, fair_est[tfield] or nil, tfield
end

-- fair_charge is what a dispatch of tenant t's job of type typ is charged
-- (ms, before the weight): the tenant's own estimate, else the type's
-- across tenants (a tenant's first jobs of a type others run are charged
-- about what they will cost, so it gets its share from its first pick
-- instead of a 1 s charge per job until one reports), else def.
local function fair_charge(t, typ, def)
  local own, _, across = fair_estimates(t, typ)
  return own or across or def
end

-- fair_learn feeds a measured run time into the EWMA of estimate e (nil:
-- the first measurement is taken as is).
local function fair_learn(e, actual)
  if not e then return actual end
  return e + FAIR_ALPHA * (actual - e)
end

-- fair_settle reconciles the slot-time charged at dispatch with the run
-- time measured by the worker: the tenant's virtual time moves by
-- (actual - estimate) / weight, and the (tenant, type) estimate and the
-- type's estimate across tenants learn the measured time. Only for the
-- current dispatch, once: the charge (est, cw) leaves the job hash, here
-- or, when f is given (the job's did, est, cw, pool, tenant and type
-- fields, read by a completion that ends the job), with the rest of the
-- hash. The moves of one script call are summed and written by fair_flush
-- (or earlier, when a tenant activates: fair_activate).
local function fair_settle(jk, did, started, finished, f)
  if not f then
    local v = redis.call('HMGET', jk, 'did', 'est', 'cw', 'pool', 'tenant', 'type')
    f = {did = v[1], est = v[2], cw = v[3], pool = v[4], tenant = v[5], type = v[6]}
    if did ~= '' and f.did == did and tonumber(f.est) then redis.call('HDEL', jk, 'est', 'cw') end
  end
  -- A terminal marker has no est (apply.lua's terminal): no charge.
  local est = tonumber(f.est)
  if did == '' or f.did ~= did or not est then return end
  if started <= 0 or finished < started then return end
  local actual = math.max(finished - started, 1)
  local w = tonumber(f.cw) or 1
  local m = (f.pool or 'short') .. '\n' .. (f.tenant or '')
  fair_vt_delta[m] = (fair_vt_delta[m] or 0) + (actual - est) / w
  local old, field, told, tfield = fair_estimates(f.tenant or '', f.type)
  fair_est[field], fair_est_dirty[field] = fair_learn(old, actual), true
  fair_est[tfield], fair_est_dirty[tfield] = fair_learn(told, actual), true
end

-- fair_flush writes the settlements of this script call: each tenant's
-- virtual time once, the learnt estimates (per tenant and type, per type)
-- in one command.
local function fair_flush()
  fair_flush_vt()
  local est = {}
  for field in pairs(fair_est_dirty) do
    est[#est + 1] = field
    est[#est + 1] = string.format('%.3f', fair_est[field])
  end
  if #est > 0 then fair_bulk('HSET', FP .. 'est', est) end
  fair_est_dirty = {}
end
