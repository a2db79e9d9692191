-- fair: helpers of the weighted fair share across tenants, prepended to
-- apply.lua and dispatch.lua (both take the key prefix as ARGV[1]). The key
-- layout and the model are described in fair.go and docs/tenancy.md.
local FP = ARGV[1]
-- FAIR_ALPHA is the weight of the newest measured duration in the EWMA of
-- a (tenant, job type)'s run time.
local FAIR_ALPHA = 0.2

-- fair_tq is the ready set of tenant t in queue q of pool.
local function fair_tq(pool, q, t) return FP .. 'pool:' .. pool .. ':q:' .. q .. ':t:' .. t end

-- fair_activate puts tenant t among the pool's tenants with ready work, at
-- its virtual time, but never behind the pool's virtual now: a tenant that
-- was idle cannot bank credit.
local function fair_activate(pool, t)
  local ak = FP .. 'pool:' .. pool .. ':active'
  if redis.call('ZSCORE', ak, t) then return end
  local vk = FP .. 'pool:' .. pool .. ':vt'
  local vt = tonumber(redis.call('HGET', vk, t)) or 0
  local vnow = tonumber(redis.call('GET', FP .. 'pool:' .. pool .. ':vnow')) or 0
  if vt < vnow then
    vt = vnow
    redis.call('HSET', vk, t, vt)
  end
  redis.call('ZADD', ak, vt, t)
end

-- fair_index lists queue q among the pool's queues and tenant t's queues
-- of the pool. Every path that makes a job ready or delayed comes through
-- here, so prune.lua may drop a queue from both sets once it stays empty:
-- the sets stay as small as the live queues.
local function fair_index(pool, q, t)
  redis.call('SADD', FP .. 'pool:' .. pool .. ':queues', q)
  redis.call('SADD', FP .. 'pool:' .. pool .. ':tq:' .. t, q)
end

-- fair_ready indexes a ready job (already in its queue's ready set with
-- score) in its tenant's ready set and activates the tenant.
local function fair_ready(jk, id, score)
  local f = redis.call('HMGET', jk, 'pool', 'queue', 'tenant')
  local pool, q, t = f[1] or 'short', f[2] or 'default', f[3] or ''
  local k = fair_tq(pool, q, t)
  redis.call('ZADD', k, score, id)
  redis.call('ZREM', k .. ':delayed', id)
  fair_index(pool, q, t)
  fair_activate(pool, t)
end

-- fair_delayed indexes a delayed job in its tenant's delayed set (for the
-- per-tenant queue listing).
local function fair_delayed(jk, id, due)
  local f = redis.call('HMGET', jk, 'pool', 'queue', 'tenant')
  local pool, q, t = f[1] or 'short', f[2] or 'default', f[3] or ''
  redis.call('ZADD', fair_tq(pool, q, t) .. ':delayed', due, id)
  fair_index(pool, q, t)
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

-- fair_unrun: the job no longer holds a slot of its tenant.
local function fair_unrun(jk, id)
  local t = redis.call('HGET', jk, 'tenant')
  if t then redis.call('SREM', FP .. 'tenant:' .. t .. ':running', id) end
end

-- fair_settle reconciles the slot-time charged at dispatch with the run
-- time measured by the worker: the tenant's virtual time moves by
-- (actual - estimate) / weight, and the (tenant, type) estimate learns the
-- measured time. Only for the current dispatch, once.
local function fair_settle(jk, did, started, finished)
  local f = redis.call('HMGET', jk, 'did', 'est', 'cw', 'pool', 'tenant', 'type')
  if did == '' or f[1] ~= did or not f[2] then return end
  redis.call('HDEL', jk, 'est', 'cw')
  if started <= 0 or finished < started then return end
  local actual = math.max(finished - started, 1)
  local est, w = tonumber(f[2]), tonumber(f[3]) or 1
  local pool, t = f[4] or 'short', f[5] or ''
  local vt = tonumber(redis.call('HINCRBYFLOAT', FP .. 'pool:' .. pool .. ':vt', t, string.format('%.6f', (actual - est) / w)))
  redis.call('ZADD', FP .. 'pool:' .. pool .. ':active', 'XX', vt, t)
  local ek, field = FP .. 'est', t .. '|' .. (f[6] or '')
  local old = tonumber(redis.call('HGET', ek, field))
  local new = actual
  if old then new = old + FAIR_ALPHA * (actual - old) end
  redis.call('HSET', ek, field, string.format('%.3f', new))
end
