-- route: type-aware routing, prepended (after fair.lua) to apply.lua and
-- dispatch.lua. The key layout and the model are described in route.go.
local RP
-- route_begin starts a script call over key prefix p (fair_begin says why).
local function route_begin(p) RP = p end
-- ROUTE_PARK_MAX bounds the jobs one dispatch step parks or releases, so
-- one step never blocks Redis for long; the loop runs again at once.
local ROUTE_PARK_MAX = 1000

local function route_pp(pool) return RP .. 'pool:' .. pool end

-- route_changed drops pool's route table kept for the dispatch steps
-- (route_table): a worker came, went, or announced other routing.
local function route_changed(pool) redis.call('DEL', route_pp(pool) .. ':rtable') end

-- route_set stores (or, for an empty routing, forgets) what worker w of
-- pool announced it routes: a JSON object {types, partitions}. A worker
-- repeats its routing in every announcement; only a change (or a new
-- worker) drops the kept route table. A worker without routing may be new
-- at any announcement (nothing records it but the workers set), so its
-- announcements always drop it: such workers predate routing, and the
-- table is only rebuilt while they run.
local function route_set(pool, w, routing)
  local k = route_pp(pool) .. ':wroute'
  if routing == '' then
    redis.call('HDEL', k, w)
    route_changed(pool)
  elseif redis.call('HGET', k, w) ~= routing then
    redis.call('HSET', k, w, routing)
    route_changed(pool)
  end
end

-- route_forget drops a worker that stopped or went silent.
local function route_forget(pool, w)
  redis.call('HDEL', route_pp(pool) .. ':wroute', w)
  route_changed(pool)
end

-- route_table reads the live workers' routing of pool: for each type, the
-- partitions owned by a live worker handling it (a partition claimed by two
-- workers during a rebalance belongs to the later announcement), and
-- whether a live worker announced no routing (a worker from before
-- routing: it takes every type, on the partition its job id hashes to).
-- The table is kept in P pool:<pool>:rtable until a worker comes, goes or
-- changes its routing (route_changed), so a step reads one key instead of
-- every live worker's routing (one read and one JSON decode per worker:
-- with 64 workers ~170 µs of Redis per step, BenchmarkDispatchStepByWorkers).
-- While two workers claim one partition (a rebalance) the owner depends on
-- which announced last, so the table is then built anew each step.
local function route_table(pool)
  local pp = route_pp(pool)
  local kept = redis.call('GET', pp .. ':rtable')
  if kept then
    local t = cjson.decode(kept)
    return {legacy = t.legacy, by = t.by, moved = 0, left = false}
  end
  local rt = {legacy = false, by = {}, moved = 0, left = false}
  local owner, seen, routes = {}, {}, {}
  local contended = false
  local ws = redis.call('ZRANGE', pp .. ':workers', 0, -1, 'WITHSCORES')
  for k = 1, #ws, 2 do
    local w, exp = ws[k], tonumber(ws[k + 1])
    local r = redis.call('HGET', pp .. ':wroute', w)
    if not r then
      rt.legacy = true
    else
      local d = cjson.decode(r)
      routes[w] = d
      if type(d.partitions) ~= 'table' then d.partitions = {} end
      if type(d.types) ~= 'table' then d.types = {} end
      for _, p in ipairs(d.partitions) do
        if owner[p] then contended = true end
        if not owner[p] or exp > seen[p] then owner[p], seen[p] = w, exp end
      end
    end
  end
  for p, w in pairs(owner) do
    for _, t in ipairs(routes[w].types) do
      local l = rt.by[t]
      if not l then
        l = {}
        rt.by[t] = l
      end
      l[#l + 1] = p
    end
  end
  for _, l in pairs(rt.by) do table.sort(l) end
  if not contended then redis.call('SET', pp .. ':rtable', cjson.encode({legacy = rt.legacy, by = rt.by})) end
  return rt
end

-- route_ok: a job of type typ may be dispatched now.
local function route_ok(rt, typ) return rt.legacy or rt.by[typ or ''] ~= nil end

-- route_partition is the dispatch partition of job id of type typ: one
-- owned by a worker handling it, or -1 (the job id's hash) when only
-- workers without routing take it. The choice is a hash of the job id, not
-- a turn, so that while the type's partitions stay the same every dispatch
-- of a job (a re-dispatch after a lost lease or a Redis rebuild) reaches
-- the same worker, which drops a duplicate of a job it runs or ran.
local function route_partition(rt, typ, id)
  local l = rt.by[typ or '']
  if not l then return -1 end
  local h = tonumber(string.sub(redis.sha1hex(id), 1, 7), 16)
  return l[(h % #l) + 1]
end

-- route_room: the step may park or release more jobs.
local function route_room(rt) return rt.moved < ROUTE_PARK_MAX end

-- route_park takes a ready job (already out of its ready sets) of a type no
-- live worker of pool handles out of the dispatch path, keeping its ready
-- score so that it returns to its place.
local function route_park(rt, pool, jk, id, score)
  local pp = route_pp(pool)
  local f = redis.call('HMGET', jk, 'queue', 'tenant', 'type', 'na')
  redis.call('ZADD', pp .. ':parked', score, id)
  redis.call('ZADD', pp .. ':parked:t:' .. (f[3] or ''), score, id)
  redis.call('ZADD', fair_tq(pool, f[1] or 'default', f[2] or '') .. ':parked', score, id)
  if tonumber(f[4]) then redis.call('ZADD', pp .. ':parked:na', tonumber(f[4]), id) end
  redis.call('HSET', jk, 'state', 'parked')
  rt.moved = rt.moved + 1
end

-- route_unpark removes a job from the parked indexes (any state: cancel,
-- completion, a new attempt and the rebuild come through here). It returns
-- the job's ready score when it was parked.
local function route_unpark(jk, id)
  local f = redis.call('HMGET', jk, 'pool', 'queue', 'tenant', 'type')
  if not f[1] then return nil end
  local pp = route_pp(f[1])
  local score = redis.call('ZSCORE', pp .. ':parked', id)
  if not score then return nil end
  redis.call('ZREM', pp .. ':parked', id)
  redis.call('ZREM', pp .. ':parked:t:' .. (f[4] or ''), id)
  redis.call('ZREM', fair_tq(f[1], f[2] or 'default', f[3] or '') .. ':parked', id)
  redis.call('ZREM', pp .. ':parked:na', id)
  return tonumber(score)
end

-- route_release makes the parked jobs of every type a live worker now
-- handles ready again, at their old place (their ready score), the oldest
-- first, at most ROUTE_PARK_MAX per step.
local function route_release(rt, pool)
  local pp = route_pp(pool)
  if redis.call('ZCARD', pp .. ':parked') == 0 then return end
  local types = {}
  if rt.legacy then
    -- Workers without routing take every type: release them all.
    local ids = redis.call('ZRANGE', pp .. ':parked', 0, ROUTE_PARK_MAX - 1)
    for _, id in ipairs(ids) do
      types[redis.call('HGET', RP .. 'job:' .. id, 'type') or ''] = true
    end
  else
    for t in pairs(rt.by) do types[t] = true end
  end
  for t in pairs(types) do
    if not route_room(rt) then
      rt.left = true
      return
    end
    local k = pp .. ':parked:t:' .. t
    for _, id in ipairs(redis.call('ZRANGE', k, 0, ROUTE_PARK_MAX - rt.moved - 1)) do
      local jk = RP .. 'job:' .. id
      local score = route_unpark(jk, id)
      if score and redis.call('HGET', jk, 'state') == 'parked' then
        redis.call('ZADD', RP .. 'q:' .. redis.call('HGET', jk, 'queue') .. ':ready', score, id)
        redis.call('HSET', jk, 'state', 'ready')
        fair_ready(jk, id, score)
      end
      rt.moved = rt.moved + 1
    end
    if redis.call('ZCARD', k) > 0 then rt.left = true end
  end
end

-- route_expiring unparks and returns the parked jobs of pool whose
-- not_after passed (at most 100 per step): a parked job still expires.
local function route_expiring(pool, now)
  local out = {}
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', route_pp(pool) .. ':parked:na', '-inf', now, 'LIMIT', 0, 100)) do
    local jk = RP .. 'job:' .. id
    route_unpark(jk, id)
    if redis.call('HGET', jk, 'state') == 'parked' then out[#out + 1] = id end
  end
  return out
end
