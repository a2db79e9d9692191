-- gates: flow control at dispatch (concurrency keys, dispatch rate limits,
-- circuit breakers), prepended to apply.lua and dispatch.lua after fair.lua.
-- The model and the key layout are described in gates.go and
-- docs/flow-control.md.
--
-- One mechanism serves every gate: when the dispatch step pops a job whose
-- gate is closed, the job is parked in that gate's parked set (by its ready
-- score, so order within the gate is kept) and the step goes on with other
-- work. When the gate opens (a slot of the key is freed, the bucket refills,
-- the breaker goes half-open or closes), the parked heads go back to ready
-- with their old scores, marked as admitted by that gate (gp), so they pass
-- it ahead of newer jobs.
local GP
-- gate_brkcfg_seen caches, per script call, the breaker configuration of
-- each (tenant, type) a failure asked for (false: none): only the flow
-- settings script writes it, so a burst of failures of one type reads it
-- once per call instead of once per failure.
local gate_brkcfg_seen
-- gate_wake_first is the first due time in P gates:wake as this call read
-- it (gate_wakeups; false: none), or nil once the call wrote the set
-- (gate_wake_set) or has not read it: gate_next_ms reads it then.
local gate_wake_first
-- gate_begin starts a script call over key prefix p (fair_begin says why).
local function gate_begin(p)
  GP = p
  gate_brkcfg_seen = {}
  gate_wake_first = nil
end
-- Failure classes that count against a breaker.
local GATE_BREAKER_CLASSES = {app_error = true, retryable = true, timeout = true}
-- GATE_CHUNK bounds the jobs one script call releases from a gate that
-- opened wide (a breaker that closed, a limit removed); the rest follow in
-- the next dispatch steps.
local GATE_CHUNK = 500

-- gate_member names gate (kind, tenant, name) in P gates:wake and in a
-- parked job's gk field.
local function gate_member(kind, t, name) return kind .. '\n' .. t .. '\n' .. name end

local function gate_split(m)
  local a = string.find(m, '\n', 1, true)
  local b = string.find(m, '\n', a + 1, true)
  return string.sub(m, 1, a - 1), string.sub(m, a + 1, b - 1), string.sub(m, b + 1)
end

-- gate_pk is the parked set of a gate; gate_run the jobs holding a slot of
-- a concurrency key (running, or admitted and on their way).
local function gate_pk(kind, t, name) return GP .. 'gate:' .. kind .. ':' .. t .. ':' .. name end
local function gate_run(t, key) return gate_pk('c', t, key) .. ':run' end
local function gate_brk(t) return GP .. 'tenant:' .. t .. ':brk' end

-- gate_wake_set runs cmd (ZADD or ZREM) with args on P gates:wake, the
-- one way the scripts write it.
local function gate_wake_set(cmd, ...)
  gate_wake_first = nil
  redis.call(cmd, GP .. 'gates:wake', ...)
end

-- gate_wake schedules a look at gate m at ms (earlier times win).
local function gate_wake(m, ms) gate_wake_set('ZADD', 'LT', ms, m) end

-- gate_event queues a breaker transition in the outbox the scheduler
-- publishes from (qstore.ClaimBreakerEvents).
local function gate_event(t, typ, from, to, reason, now, failures, actor)
  local seq = redis.call('INCR', GP .. 'gates:evseq')
  redis.call('ZADD', GP .. 'gates:outbox', now, string.format('%015d ', seq) .. cjson.encode({
    seq = seq, tenant = t, type = typ, from = from, to = to, reason = reason, at = now, failures = failures or 0,
    actor = actor or ''}))
end

-- gate_park moves a popped job into the parked set of its closed gate.
local function gate_park(kind, t, name, jk, id, score, wake_ms)
  local m = gate_member(kind, t, name)
  redis.call('ZADD', gate_pk(kind, t, name), score, id)
  redis.call('HSET', jk, 'state', 'parked', 'gk', m)
  redis.call('HINCRBY', GP .. 'gates:stats', kind, 1)
  if wake_ms then gate_wake(m, wake_ms) end
end

-- gate_passed: gp (the gates a job passed, one letter each) holds kind;
-- gate_mark adds kind to it.
local function gate_passed(gp, kind) return gp ~= nil and gp ~= false and string.find(gp, kind, 1, true) ~= nil end
local function gate_mark(gp, kind)
  gp = gp or ''
  if gate_passed(gp, kind) then return gp end
  return gp .. kind
end

-- gate_unpark puts a parked job back in its ready sets with its old score,
-- marked as admitted by gate kind (added to the gates that admitted it
-- before, so a job behind two rate limits takes one token of each). False
-- when it is no longer parked.
local function gate_unpark(kind, id, score)
  local jk = GP .. 'job:' .. id
  local f = redis.call('HMGET', jk, 'state', 'queue', 'gp')
  if f[1] ~= 'parked' then return false end
  redis.call('HINCRBY', GP .. 'gates:stats', kind, -1)
  redis.call('ZADD', GP .. 'q:' .. f[2] .. ':ready', score, id)
  redis.call('HSET', jk, 'state', 'ready', 'gk', '', 'gp', gate_mark(f[3], kind))
  fair_ready(jk, id, score)
  return true
end

-- gate_release unparks up to n heads of a gate, calling admitted(id) for
-- each; it returns how many it released.
local function gate_release(kind, t, name, n, admitted)
  local pk, done = gate_pk(kind, t, name), 0
  while done < n do
    local r = redis.call('ZPOPMIN', pk)
    if #r == 0 then break end
    if gate_unpark(kind, r[1], tonumber(r[2])) then
      done = done + 1
      if admitted then admitted(r[1]) end
    end
  end
  return done
end

-- Concurrency keys ---------------------------------------------------------

-- gate_conc_fill admits parked jobs of key while slots are free.
local function gate_conc_fill(t, key)
  local rk, pk = gate_run(t, key), gate_pk('c', t, key)
  while true do
    local r = redis.call('ZRANGE', pk, 0, 0)
    if #r == 0 then return end
    local lim = tonumber(redis.call('HGET', GP .. 'job:' .. r[1], 'cl')) or 1
    if redis.call('SCARD', rk) >= lim then return end
    gate_release('c', t, key, 1, function(id) redis.call('SADD', rk, id) end)
  end
end

-- gate_conc_admit: the job may start when it already holds a slot of its
-- key, or a slot is free and nobody of the key waits before it.
local function gate_conc_admit(t, key, lim, jk, id, score)
  local rk = gate_run(t, key)
  if redis.call('SISMEMBER', rk, id) == 1 then return true end
  if redis.call('SCARD', rk) < lim and redis.call('EXISTS', gate_pk('c', t, key)) == 0 then
    redis.call('SADD', rk, id)
    return true
  end
  gate_park('c', t, key, jk, id, score, nil)
  return false
end

-- Dispatch rate limits (token bucket per tenant and job type, kind r, or
-- per tenant and concurrency key, kind k, named "@" .. key) ----------------

-- gate_rate_kind is the gate kind of rate limit name (a type or "@" .. key).
local function gate_rate_kind(name)
  if string.sub(name, 1, 1) == '@' then return 'k' end
  return 'r'
end

-- gate_bucket is the refilled bucket of rate limit (t, name) under cfg
-- "rate burst".
local function gate_bucket(kind, t, name, cfg, now)
  local sp = string.find(cfg, ' ', 1, true)
  local rate, burst = tonumber(string.sub(cfg, 1, sp - 1)), tonumber(string.sub(cfg, sp + 1))
  local bk = gate_pk(kind, t, name) .. ':bucket'
  local b = redis.call('HMGET', bk, 'tok', 'at')
  local tok, at = tonumber(b[1]), tonumber(b[2])
  if not tok then tok, at = burst, now end
  tok = math.min(burst, tok + math.max(now - at, 0) * rate / 1000)
  return tok, rate, bk
end

-- gate_refill_ms is when the bucket holds a whole token again.
local function gate_refill_ms(tok, rate, now) return now + math.max(math.ceil((1 - tok) * 1000 / rate), 1) end

local function gate_rate_admit(kind, t, name, cfg, jk, id, score, gp, now)
  if gate_passed(gp, kind) then return true end -- its token was taken when it was released
  local tok, rate, bk = gate_bucket(kind, t, name, cfg, now)
  if tok >= 1 and redis.call('EXISTS', gate_pk(kind, t, name)) == 0 then
    redis.call('HSET', bk, 'tok', tok - 1, 'at', now)
    return true
  end
  redis.call('HSET', bk, 'tok', tok, 'at', now)
  gate_park(kind, t, name, jk, id, score, gate_refill_ms(tok, rate, now))
  return false
end

-- gate_rate_wake releases as many parked jobs as the bucket holds tokens.
local function gate_rate_wake(kind, t, name, now)
  local m = gate_member(kind, t, name)
  local cfg = redis.call('HGET', GP .. 'tenant:' .. t .. ':rates', name)
  local n = GATE_CHUNK
  local tok, rate, bk
  if cfg then
    tok, rate, bk = gate_bucket(kind, t, name, cfg, now)
    n = math.min(math.floor(tok), GATE_CHUNK)
  end
  local done = gate_release(kind, t, name, n, nil)
  if cfg then redis.call('HSET', bk, 'tok', tok - done, 'at', now) end
  if redis.call('EXISTS', gate_pk(kind, t, name)) == 0 then
    gate_wake_set('ZREM', m)
  elseif cfg then
    gate_wake_set('ZADD', gate_refill_ms(tok - done, rate, now), m)
  else
    gate_wake_set('ZADD', now, m)
  end
end

-- Circuit breakers (per tenant and job type) -------------------------------
-- P tenant:<t>:brk holds the breakers that are not closed: type → "open
-- <until_ms>" or "half <probe job id, or empty>".

local function gate_brk_state(st)
  local sp = string.find(st, ' ', 1, true)
  return string.sub(st, 1, sp - 1), string.sub(st, sp + 1)
end

-- gate_brk_set writes a breaker state (nil: closed) and keeps the tenant's
-- bg flag (any breaker not closed) that dispatch reads.
local function gate_brk_set(t, typ, st)
  local bk, ck = gate_brk(t), GP .. 'tenant:' .. t .. ':cfg'
  if st then
    if redis.call('HSET', bk, typ, st) == 1 then redis.call('HINCRBY', GP .. 'gates:stats', 'open', 1) end
    redis.call('HSET', ck, 'bg', 1)
  else
    if redis.call('HDEL', bk, typ) == 1 then redis.call('HINCRBY', GP .. 'gates:stats', 'open', -1) end
    if redis.call('HLEN', bk) == 0 then redis.call('HSET', ck, 'bg', 0) end
  end
end

-- gate_brk_half: the cool-down is over; let one probe through.
local function gate_brk_half(t, typ, probe, now)
  gate_brk_set(t, typ, 'half ' .. probe)
  gate_event(t, typ, 'open', 'half_open', 'cooldown_elapsed', now)
end

local function gate_brk_admit(t, typ, st, jk, id, score, gp, now, states)
  local mode, arg = gate_brk_state(st)
  if mode == 'open' then
    local untl = tonumber(arg)
    if now < untl or redis.call('EXISTS', gate_pk('b', t, typ)) == 1 then
      gate_park('b', t, typ, jk, id, score, untl)
      return false
    end
    gate_brk_half(t, typ, id, now)
    states[typ] = 'half ' .. id
    redis.call('HSET', jk, 'probe', 1)
    return true
  end
  if arg == id then return true end
  if arg == '' and (gate_passed(gp, 'b') or redis.call('EXISTS', gate_pk('b', t, typ)) == 0) then
    gate_brk_set(t, typ, 'half ' .. id)
    states[typ] = 'half ' .. id
    redis.call('HSET', jk, 'probe', 1)
    return true
  end
  gate_park('b', t, typ, jk, id, score, nil)
  return false
end

-- gate_brk_wake: an open breaker's cool-down ended (one job goes, as the
-- probe), its probe ended without a verdict (the next one goes), or it
-- closed (everything goes, a chunk at a time).
local function gate_brk_wake(t, typ, now)
  local m = gate_member('b', t, typ)
  local st = redis.call('HGET', gate_brk(t), typ)
  if not st then
    gate_release('b', t, typ, GATE_CHUNK, nil)
    if redis.call('EXISTS', gate_pk('b', t, typ)) == 1 then gate_wake(m, now) else gate_wake_set('ZREM', m) end
    return
  end
  gate_wake_set('ZREM', m)
  local mode, arg = gate_brk_state(st)
  if mode == 'open' then
    if now < tonumber(arg) then
      gate_wake(m, tonumber(arg))
      return
    end
    gate_brk_half(t, typ, '', now)
    arg = ''
  end
  if arg == '' then gate_release('b', t, typ, 1, nil) end
end

-- gate_brk_open opens (t, typ)'s breaker for cool ms.
local function gate_brk_open(t, typ, from, reason, now, cool, failures)
  gate_brk_set(t, typ, 'open ' .. (now + cool))
  gate_event(t, typ, from, 'open', reason, now, failures)
  if redis.call('EXISTS', gate_pk('b', t, typ)) == 1 then gate_wake(gate_member('b', t, typ), now + cool) end
end

-- gate_brk_close closes (t, typ)'s breaker and releases its parked jobs.
local function gate_brk_close(t, typ, from, reason, now, actor)
  gate_brk_set(t, typ, nil)
  redis.call('DEL', gate_pk('bf', t, typ))
  gate_event(t, typ, from, 'closed', reason, now, 0, actor)
  if redis.call('EXISTS', gate_pk('b', t, typ)) == 1 then gate_wake(gate_member('b', t, typ), now) end
end

-- gate_probe_gone: the probe left without a verdict (cancelled, expired,
-- or a failure that does not count): let the next job probe.
local function gate_probe_gone(t, typ, now)
  local st = redis.call('HGET', gate_brk(t), typ)
  if st and string.sub(st, 1, 5) == 'half ' then
    gate_brk_set(t, typ, 'half ')
    gate_wake(gate_member('b', t, typ), now)
  end
end

local function gate_brkcfg(t, typ)
  local field = t .. '\n' .. typ
  local cfg = gate_brkcfg_seen[field]
  if cfg == nil then
    local c = redis.call('HMGET', GP .. 'tenant:' .. t .. ':brkcfg', typ, '*')
    cfg = c[1] or c[2] or false
    gate_brkcfg_seen[field] = cfg
  end
  return cfg or nil
end

-- gate_failed counts a failed run (class) of a job of tenant t and type
-- typ against the breaker, when the tenant configured one for the type.
local function gate_failed(t, typ, probe, id, did, class, now)
  if not GATE_BREAKER_CLASSES[class] then
    if probe then gate_probe_gone(t, typ, now) end
    return
  end
  local cfg = gate_brkcfg(t, typ)
  if not cfg then
    if probe then gate_probe_gone(t, typ, now) end
    return
  end
  local a = string.find(cfg, ' ', 1, true)
  local b = string.find(cfg, ' ', a + 1, true)
  local thr, win, cool = tonumber(string.sub(cfg, 1, a - 1)), tonumber(string.sub(cfg, a + 1, b - 1)), tonumber(string.sub(cfg, b + 1))
  local st = redis.call('HGET', gate_brk(t), typ)
  if st then
    if probe and string.sub(st, 1, 5) == 'half ' then gate_brk_open(t, typ, 'half_open', 'probe_failed', now, cool, 1) end
    return
  end
  local fk = gate_pk('bf', t, typ)
  redis.call('ZADD', fk, now, id .. '|' .. did)
  redis.call('ZREMRANGEBYSCORE', fk, '-inf', now - win)
  redis.call('PEXPIRE', fk, win)
  local n = redis.call('ZCARD', fk)
  if n >= thr then
    redis.call('DEL', fk)
    gate_brk_open(t, typ, 'closed', 'failures', now, cool, n)
  end
end

-- gate_succeeded: a job completed; a probe's success closes its breaker.
local function gate_succeeded(jk, t, typ, now)
  redis.call('HDEL', jk, 'probe')
  local st = redis.call('HGET', gate_brk(t), typ)
  if st and string.sub(st, 1, 5) == 'half ' then gate_brk_close(t, typ, 'half_open', 'probe_succeeded', now) end
end

-- Shared entry points --------------------------------------------------------

-- gate_leave: a job leaves its gates for good (terminal, failed, or a new
-- attempt replaces it): out of its parked set, its concurrency slot freed
-- (admitting the next job of the key), its probe given up. f holds the
-- job's ck, gk, tenant, probe and type fields.
local function gate_leave(jk, id, ck, gk, t, probe, typ, now)
  if gk and gk ~= '' then
    local kind, gt, name = gate_split(gk)
    if redis.call('ZREM', gate_pk(kind, gt, name), id) == 1 then redis.call('HINCRBY', GP .. 'gates:stats', kind, -1) end
  end
  if ck and ck ~= '' and t then
    redis.call('SREM', gate_run(t, ck), id)
    gate_conc_fill(t, ck)
  end
  if probe == '1' and t then
    redis.call('HDEL', jk, 'probe')
    gate_probe_gone(t, typ or '', now)
  end
end

-- gate_wakeups serves the gates whose timer is due (dispatch step). It
-- reads the first due time first, so a step with no timer due scans
-- nothing, and gate_next_ms knows it unless the step writes the set.
local function gate_wakeups(now)
  gate_wake_first = zfirst(GP .. 'gates:wake')
  if not gate_wake_first or gate_wake_first > now then return end
  gate_wake_first = nil
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', GP .. 'gates:wake', '-inf', now, 'LIMIT', 0, 100)) do
    local kind, t, name = gate_split(m)
    if kind == 'r' or kind == 'k' then
      gate_rate_wake(kind, t, name, now)
    elseif kind == 'b' then
      gate_brk_wake(t, name, now)
    else
      gate_wake_set('ZREM', m)
    end
  end
end

-- gate_next_ms is the earliest gate timer (-1 when none).
local function gate_next_ms()
  if gate_wake_first == nil then gate_wake_first = zfirst(GP .. 'gates:wake') end
  return gate_wake_first or -1
end

-- gate_tenant loads what dispatch needs of tenant t's gates, from its cfg
-- flags rg (has dispatch rate limits) and bg (has breakers not closed):
-- nothing at all for a tenant without either.
local function gate_tenant(t, rg, bg)
  local g = {}
  if rg == '1' then
    g.rates = {}
    local h = redis.call('HGETALL', GP .. 'tenant:' .. t .. ':rates')
    for k = 1, #h, 2 do g.rates[h[k]] = h[k + 1] end
  end
  if bg == '1' then
    g.brk = {}
    local h = redis.call('HGETALL', gate_brk(t))
    for k = 1, #h, 2 do g.brk[h[k]] = h[k + 1] end
  end
  return g
end

-- gate_held: a later gate parked a job that passed rate limits on its way
-- (their tokens taken): they join its gp, so it takes no second token of
-- them when released. Returns false (not admitted).
local function gate_held(jk, gp, passed)
  if passed ~= (gp or '') then redis.call('HSET', jk, 'gp', passed) end
  return false
end

-- gate_admit decides whether a popped ready job may start now; if not it
-- is parked. g is gate_tenant's answer for the job's tenant; f the job's
-- type, ck, cl and gp fields; score its ready score. Jobs without
-- concurrency key, of a type without rate limit or open breaker, cost
-- nothing here. A key's rate limit comes after the key's slot, so a job
-- waiting for a token holds its slot rather than a token it cannot use.
local function gate_admit(g, t, jk, id, score, typ, ck, cl, gp, now)
  typ = typ or ''
  local gated, passed = false, gp or ''
  if g.brk and g.brk[typ] then
    gated = true
    if not gate_brk_admit(t, typ, g.brk[typ], jk, id, score, gp, now, g.brk) then return false end
  end
  if g.rates and g.rates[typ] then
    gated = true
    if not gate_rate_admit('r', t, typ, g.rates[typ], jk, id, score, passed, now) then return false end
    passed = gate_mark(passed, 'r')
  end
  if ck and ck ~= '' then
    gated = true
    if not gate_conc_admit(t, ck, tonumber(cl) or 1, jk, id, score) then return gate_held(jk, gp, passed) end
    local kr = g.rates and g.rates['@' .. ck]
    if kr and not gate_rate_admit('k', t, '@' .. ck, kr, jk, id, score, passed, now) then return gate_held(jk, gp, passed) end
  end
  if gated and gp and gp ~= '' then redis.call('HSET', jk, 'gp', '') end
  return true
end

-- gate_run_failed: a run ended in failure (class, not worker_lost): it
-- counts against the type's breaker, and frees its concurrency slot.
local function gate_run_failed(jk, id, did, class, t, typ, probe, ck, now)
  if not t then return end
  if probe == '1' then redis.call('HDEL', jk, 'probe') end
  gate_failed(t, typ or '', probe == '1', id, did, class, now)
  if ck and ck ~= '' then gate_leave(jk, id, ck, nil, t, nil, typ, now) end
end
