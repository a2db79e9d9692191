-- prune: mark and sweep of one pool's queue indexes (pool:<p>:queues and
-- each tenant's pool:<p>:tq:<t>), run by a housekeeping loop, off the
-- dispatch path. A queue found with neither ready nor delayed jobs is
-- marked idle with the time; found idle again grace ms or more later, it
-- leaves the index (fair_index puts it back with its next job). So a drained
-- queue stays listed (GET /v1/queues, the gauges) for at least grace, and
-- the dispatch step's loops over the indexes follow the live queues, not
-- every name a tenant ever used.
-- Needs fair.lua (fair_tq). ARGV: prefix pool now_ms grace_ms
-- Returns {pool queues dropped, tenant queues dropped}.
local P, pool = ARGV[1], ARGV[2]
fair_begin(P)
local now, grace = tonumber(ARGV[3]), tonumber(ARGV[4])
local PP = P .. 'pool:' .. pool

-- sweep applies the rule to member of set, tracked as field of hash idle;
-- it returns 1 when member left the set.
local function sweep(idle, set, member, field, empty)
  if not empty then
    redis.call('HDEL', idle, field)
    return 0
  end
  local since = tonumber(redis.call('HGET', idle, field))
  if not since then
    redis.call('HSET', idle, field, now)
    return 0
  end
  if now - since < grace then return 0 end
  redis.call('SREM', set, member)
  redis.call('HDEL', idle, field)
  return 1
end

local dropped, tdropped = 0, 0
local qset = PP .. ':queues'
for _, q in ipairs(redis.call('SMEMBERS', qset)) do
  local empty = redis.call('ZCARD', P .. 'q:' .. q .. ':ready') == 0 and redis.call('ZCARD', P .. 'q:' .. q .. ':delayed') == 0
  dropped = dropped + sweep(PP .. ':idle', qset, q, q, empty)
end
-- Every tenant that ever had work dispatched in the pool has a virtual time;
-- a tenant with only delayed work has nothing to drop yet.
for _, t in ipairs(redis.call('HKEYS', PP .. ':vt')) do
  local tqk = PP .. ':tq:' .. t
  for _, q in ipairs(redis.call('SMEMBERS', tqk)) do
    local k = fair_tq(pool, q, t)
    local empty = redis.call('ZCARD', k) == 0 and redis.call('ZCARD', k .. ':delayed') == 0 and redis.call('ZCARD', k .. ':parked') == 0
    tdropped = tdropped + sweep(PP .. ':tqidle', tqk, q, t .. '\n' .. q, empty)
  end
end
return {dropped, tdropped}
