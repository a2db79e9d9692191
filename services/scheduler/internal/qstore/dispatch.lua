-- dispatch: one scheduling step for one pool, atomically: forget silent
-- workers, re-queue jobs whose lease expired (worker_lost: same attempt, at
-- the front of their priority), promote due delayed jobs, then pop up to
-- (live slots + prefetch - in flight) ready jobs, more if they are short
-- (4), and lease them: the tenant with the least virtual time (weighted
-- slot-time) that has ready work in an unpaused queue and is under its
-- max_running goes first, and its best job (priority, then FIFO, across its
-- queues of the pool) is popped (fair.lua).
-- ARGV: prefix pool now_ms lease_ms prefetch max_batch dispatch_id_prefix ttl_s outbox_retry_ms check_epoch
--       default_estimate_ms lookahead_ms work_window_ms work_max housekeeping
-- housekeeping '0' skips what a dispatch loop's steps do at least ten times
-- a second anyway (1, 2, 5b, 6: silent workers, expired leases, parked
-- jobs past not_after, unacknowledged dead letters): a step an apply runs
-- (applydispatch.lua) leases what the apply made ready; its next lease
-- time is then only its own leases' (the loop keeps its own).
-- Returns {next_due_ms, next_lease_ms, n_dispatched, n_expired, more,
--          (trailer: n_dispatched traceparents, expired lease count)
--          dispatched (8 fields each)..., expired (8 fields each)...}.
-- next_due_ms is when a delayed job is due, or enters the look-ahead (3a).
--
-- dispatch_run is the call. Unlike apply's, the step's helpers are
-- closures over the step's own state (its cursors, counts and replies), so
-- they are defined in the call.
local function dispatch_run(ARGV)
  local P, pool = ARGV[1], ARGV[2]
  fair_begin(P)
  gate_begin(P)
  route_begin(P)
  local now, lease = tonumber(ARGV[3]), tonumber(ARGV[4])
  local prefetch, maxb = tonumber(ARGV[5]), tonumber(ARGV[6])
  local didp, retry_ms = ARGV[7], tonumber(ARGV[9])
  if ARGV[10] == '1' and redis.call('EXISTS', P .. 'epoch') == 0 then
    return redis.error_reply('NOEPOCH scheduler state lost; rebuild required')
  end
  local PP = P .. 'pool:' .. pool
  local inflight, wz, wh, outbox = PP .. ':inflight', PP .. ':workers', PP .. ':slots', PP .. ':outbox'
  local held = PP .. ':held'
  local housekeeping = ARGV[15] ~= '0'

  -- 1. Workers silent past their expiry are gone.
  if housekeeping then
    for _, w in ipairs(redis.call('ZRANGEBYSCORE', wz, '-inf', now)) do
      redis.call('ZREM', wz, w)
      redis.call('HDEL', wh, w)
      redis.call('HDEL', PP .. ':holds', w)
      route_forget(pool, w)
    end
  end

  -- The step reads the first due time of each set it sweeps before
  -- sweeping it (zfirst, fair.lua): a set with nothing due is not scanned,
  -- and its first due time is known for 7 without reading it again unless
  -- the step changed the set (no apply call runs inside a step).

  -- 2. Expired leases, of attempts on workers (inflight) and of attempts held
  -- outside them (held: async http jobs, apply.lua). first_lease is the
  -- earliest lease deadline after the step (7): the sets' first deadlines
  -- once the expired are gone, and the leases this step adds (note_lease).
  local lost = 0
  local first_lease
  local function note_lease(ms)
    if not first_lease or ms < first_lease then first_lease = ms end
  end
  for _, leases in ipairs(housekeeping and {inflight, held} or {}) do
    local first = zfirst(leases)
    if first and first <= now then
      for _, id in ipairs(redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, 1000)) do
        redis.call('ZREM', leases, id)
        local jk = P .. 'job:' .. id
        fair_unrun(jk, id)
        if redis.call('HGET', jk, 'state') == 'inflight' then
          fair_make_ready(jk, id, true, nil, false)
          lost = lost + 1
        end
      end
      first = zfirst(leases)
    end
    if first then note_lease(first) end
  end

  -- 3a. Lease-ahead (lookahead_ms > 0), into the workers' holds: a delayed
  -- job due by now + lookahead is dispatched now (5c) with its due time as
  -- not-before (nb); its worker keeps it in its hold, outside its handler
  -- slots, and starts it at that instant, never earlier. Each worker
  -- announces how many dispatches it holds (holds); the jobs leased ahead
  -- and not yet due are in the ahead set, scored by nb. They take no slot
  -- until due (capacity, 4, does not count them in flight); once due they
  -- leave the ahead set and count like every job in flight. A job leased
  -- ahead and cancelled or lost before its due time stays counted until
  -- then: at most the look-ahead, and never more than the holds.
  local aheadk = PP .. ':ahead'
  local ahead = tonumber(ARGV[12]) or 0
  local n_ahead = redis.call('ZCARD', aheadk)
  if n_ahead > 0 then n_ahead = n_ahead - redis.call('ZREMRANGEBYSCORE', aheadk, '-inf', now) end
  local ahead_room = 0
  if ahead > 0 then
    for _, h in ipairs(redis.call('HVALS', PP .. ':holds')) do ahead_room = ahead_room + tonumber(h) end
    ahead_room = ahead_room - n_ahead
  end
  local slots = 0
  for _, s in ipairs(redis.call('HVALS', wh)) do slots = slots + tonumber(s) end

  -- 3. Due delayed jobs. A score is the due time rounded up to the ms, so
  -- nothing is promoted early. Queues that stay empty leave the pool's index
  -- (prune.lua), so this loop costs what the live queues cost.
  -- delayed_first[q] is the first due time of queue q's delayed set as this
  -- step left it (false: empty), nil once the step took jobs out of it
  -- (here or in 5c): 7 reads it again then.
  local queues = redis.call('SMEMBERS', PP .. ':queues')
  local delayed_first = {}
  for _, q in ipairs(queues) do
    local dk = P .. 'q:' .. q .. ':delayed'
    local first = zfirst(dk)
    if first and first <= now then
      local due = redis.call('ZRANGEBYSCORE', dk, '-inf', now, 'LIMIT', 0, 1000)
      if #due > 0 then redis.call('ZREM', dk, unpack(due)) end
      for _, id in ipairs(due) do
        local jk = P .. 'job:' .. id
        local f = redis.call('HMGET', jk, 'state', 'pool', 'queue', 'tenant', 'prio', 'seq')
        if f[1] == 'delayed' then
          fair_make_ready(jk, id, false, {pool = f[2] or 'short', queue = f[3] or 'default', tenant = f[4] or '', prio = f[5]}, true)
        end
      end
    else
      delayed_first[q] = first
    end
  end

  -- 3b. Gates whose timer is due (rate-limit refills, breaker cool-downs)
  -- release their parked jobs (gates.lua).
  gate_wakeups(now)

  -- 3c. Routing (route.lua): which types live workers take, on which
  -- partitions; parked jobs of those types are ready again.
  local rt = route_table(pool)
  route_release(rt, pool)

  -- 4. Capacity (slots: 3a): the jobs in flight, less those leased ahead and
  -- not yet due (they wait in the holds). No live worker, no dispatch.
  -- Short jobs may go further ahead than prefetch: the work window (5's
  -- short_enough) lets a job whose estimate is e ms go while the dispatches
  -- beyond the slots are fewer than slots × work_ms / e (at most work_max),
  -- so each slot has about work_ms of expected work waiting, whatever the
  -- jobs' length: a burst of 1 ms jobs goes at once, one of 500 ms jobs adds
  -- a few per slot. cap is the most a step may pop, base_cap what it may pop
  -- whatever the jobs' length.
  local def_est = tonumber(ARGV[11]) or 1000
  local work_ms, work_max = tonumber(ARGV[13]) or 0, tonumber(ARGV[14]) or 0
  local cap, base_cap = 0, 0
  if slots > 0 then
    local busy = redis.call('ZCARD', inflight) - n_ahead
    base_cap = slots + prefetch - busy
    cap = base_cap
    if work_ms > 0 then cap = slots + math.max(prefetch, work_max) - busy end
  end
  if cap > maxb then cap = maxb end
  local disp, exp, tps, parts, nbs = {}, {}, {}, {}, {}
  -- emit adds dispatch did of job id to the reply; f holds the job's
  -- attempt, tenant, created, ready, spec and tp fields at 3 to 8 (the
  -- field order of the reads in 5 and 5c); nb is its not-before (0: none).
  local function emit(id, did, f, lease_until, part, nb)
    disp[#disp + 1] = id
    disp[#disp + 1] = did
    for m = 3, 7 do disp[#disp + 1] = f[m] or '' end
    disp[#disp + 1] = lease_until
    tps[#tps + 1] = f[8] or ''
    parts[#parts + 1] = part
    nbs[#nbs + 1] = nb
  end
  local function expired(jk, id)
    local f = redis.call('HMGET', jk, 'attempt', 'tenant', 'created', 'ready', 'spec', 'history', 'rf')
    exp[#exp + 1] = id
    for k = 1, 7 do exp[#exp + 1] = f[k] or '' end
  end

  -- tenant_settings is what a step needs of tenant t's settings, read once
  -- per step (by 5 and 5c): its weight (at least 1), its max_running (0:
  -- none), its gates' flags (rg: dispatch rate limits, bg: a breaker not
  -- closed) and, filled by paused_queue, the queues it paused.
  local tenant_settings_of = {}
  local function tenant_settings(t)
    local c = tenant_settings_of[t]
    if not c then
      local v = redis.call('HMGET', P .. 'tenant:' .. t .. ':cfg', 'w', 'max', 'rg', 'bg')
      local w = tonumber(v[1]) or 1
      if w <= 0 then w = 1 end
      c = {w = w, max = tonumber(v[2]) or 0, rg = v[3], bg = v[4], paused = {}}
      tenant_settings_of[t] = c
    end
    return c
  end
  -- paused_queue: tenant t, of settings c, paused queue q.
  local function paused_queue(c, t, q)
    if c.paused[q] == nil then
      c.paused[q] = redis.call('SISMEMBER', P .. 'tenant:' .. t .. ':paused', q) == 1
    end
    return c.paused[q]
  end

  -- 5. Pop up to cap jobs, fairly across tenants (fair.lua): each pick takes
  -- the active tenant with the least virtual time that is under its
  -- max_running and has a ready job in a queue it has not paused, pops that
  -- tenant's best job (priority, then FIFO, across its queues) and charges it
  -- estimate / weight. At most FAIR_SCAN tenants (by virtual time) are
  -- considered per step.
  --
  -- The fast path: each tenant queue's first jobs are read in one ZRANGE (a
  -- cursor), and the sets a step only removes from or adds to (the ready
  -- sets, the lease set, the running sets) are written once per step
  -- (settle_sets), so a plain job costs two commands here: its fields read
  -- and its state written. Parking a job (routing, gates) touches no ready
  -- set; before an expiry, whose gates may put jobs back into ready sets,
  -- the pending writes go out, and the cursors read again after it.
  -- drained: the pops ended because no tenant had a ready job it may run.
  local popped, parked, drained = 0, 0, false
  -- short_enough: tenant t's job of type typ fits the window with the
  -- step's popped dispatches ahead of it (4).
  local function short_enough(t, typ)
    if popped < base_cap then return true end
    if work_ms <= 0 then return false end
    local e = math.max(fair_charge(t, typ, def_est), 1)
    return popped - base_cap + prefetch < math.min(work_max, slots * work_ms / e)
  end
  if cap > 0 then
    local FAIR_SCAN = 512
    local HEADS = math.min(cap, 64)
    local ak, vk = PP .. ':active', PP .. ':vt'
    local vnow = tonumber(redis.call('GET', PP .. ':vnow')) or 0
    local vnow0 = vnow
    local cursors, unready, leases, running = {}, {}, {}, {}

    -- cur_read reads the first jobs of cursor c's set.
    local function cur_read(c)
      local r = redis.call('ZRANGE', c.k, 0, HEADS - 1, 'WITHSCORES')
      c.ids, c.sc, c.pos = {}, {}, 1
      for k = 1, #r, 2 do
        c.ids[#c.ids + 1] = r[k]
        c.sc[#c.sc + 1] = tonumber(r[k + 1])
      end
      c.more = #c.ids == HEADS
    end
    -- cur_head is the first job of c not taken yet and its score, or nil.
    local function cur_head(c)
      if c.pos > #c.ids then
        if not c.more then return nil end
        fair_bulk('ZREM', c.k, c.taken)
        c.taken = {}
        cur_read(c)
        if c.pos > #c.ids then return nil end
      end
      return c.ids[c.pos], c.sc[c.pos]
    end
    -- cur_take takes c's head out of its ready sets (written by settle_sets).
    local function cur_take(c, id)
      c.taken[#c.taken + 1] = id
      c.pos = c.pos + 1
      fair_push(unready, c.q, id)
    end
    -- settle_sets writes the pending set changes; stale: the ready sets may
    -- have changed meanwhile, so every cursor reads its set again.
    local function settle_sets(stale)
      for _, c in ipairs(cursors) do
        fair_bulk('ZREM', c.k, c.taken)
        c.taken = {}
        if stale then c.ids, c.sc, c.pos, c.more = {}, {}, 1, true end
      end
      for q, ids in pairs(unready) do fair_bulk('ZREM', P .. 'q:' .. q .. ':ready', ids) end
      unready = {}
      fair_bulk('ZADD', inflight, leases)
      leases = {}
      for t, ids in pairs(running) do fair_bulk('SADD', P .. 'tenant:' .. t .. ':running', ids) end
      running = {}
    end
    -- best_head is tenant x's best cursor (priority, then FIFO, across its
    -- queues) with its head, or nil when x has no ready job left.
    local function best_head(x)
      local bc, bid, bs
      for _, c in ipairs(x.cursors) do
        local id, sc = cur_head(c)
        if id and (not bc or sc < bs or (sc == bs and id < bid)) then bc, bid, bs = c, id, sc end
      end
      return bc, bid, bs
    end

    local ten = {}
    local act = redis.call('ZRANGE', ak, 0, FAIR_SCAN - 1, 'WITHSCORES')
    for k = 1, #act, 2 do
      local t = act[k]
      local c = tenant_settings(t)
      local room = cap
      if c.max > 0 then room = c.max - redis.call('SCARD', P .. 'tenant:' .. t .. ':running') end
      local x = {t = t, vt = tonumber(act[k + 1]), w = c.w, room = room, cursors = {}, dirty = false,
        g = gate_tenant(t, c.rg, c.bg)}
      for _, q in ipairs(redis.call('SMEMBERS', PP .. ':tq:' .. t)) do
        if not paused_queue(c, t, q) then
          local cur = {k = fair_tq(pool, q, t), q = q, taken = {}}
          cur_read(cur)
          if #cur.ids > 0 then
            x.cursors[#x.cursors + 1] = cur
            cursors[#cursors + 1] = cur
          end
        end
      end
      if #x.cursors > 0 then
        ten[#ten + 1] = x
      else
        -- No ready job it may run: inactive until a job or a resume
        -- activates it again (at no less than the virtual now).
        fair_deactivate(pool, t)
      end
    end
    local lease_until = now + lease
    while popped < cap and route_room(rt) do
      local best, bc, id, score
      for _, x in ipairs(ten) do
        if x.room > 0 and (not best or x.vt < best.vt or (x.vt == best.vt and x.t < best.t)) then
          local c, hid, hs = best_head(x)
          if c then best, bc, id, score = x, c, hid, hs end
        end
      end
      if not best then
        drained = true
        break
      end
      local jk = P .. 'job:' .. id
      local f = redis.call('HMGET', jk, 'state', 'na', 'attempt', 'tenant', 'created', 'ready', 'spec', 'tp', 'type',
        'ck', 'cl', 'gp', 'probe', 'nb')
      -- Past slots + prefetch only jobs short enough go (4); the pick that
      -- is not waits at the head of its tenant's queue for the next step.
      if f[1] == 'ready' and not short_enough(best.t, f[9]) then break end
      cur_take(bc, id)
      best.dirty = true
      popped = popped + 1
      if best.vt > vnow then vnow = best.vt end
      if f[1] == 'ready' then
        local na = tonumber(f[2])
        local admitted = false
        if na and na <= now then
          -- Its gates may release other jobs into the ready sets: the
          -- pending writes go first, and the cursors read again after.
          settle_sets(false)
          redis.call('HSET', jk, 'state', 'expiring')
          redis.call('ZADD', outbox, now + retry_ms, id)
          expired(jk, id)
          gate_leave(jk, id, f[10], nil, best.t, f[13], f[9], now)
          settle_sets(true)
        elseif not route_ok(rt, f[9]) then
          -- No live worker takes its type: parked, out of the way (route.lua),
          -- before any gate counts it.
          route_park(rt, pool, jk, id, score)
          popped = popped - 1
        elseif not gate_admit(best.g, best.t, jk, id, score, f[9], f[10], f[11], f[12], now) then
          popped = popped - 1 -- parked in its closed gate (gates.lua); the step goes on
          parked = parked + 1
        else
          admitted = true
        end
        if admitted then
          local est = fair_charge(best.t, f[9], def_est)
          best.vt = best.vt + est / best.w
          best.room = best.room - 1
          local did = didp .. '-' .. popped
          redis.call('HSET', jk, 'state', 'inflight', 'did', did, 'est', est, 'cw', best.w)
          leases[#leases + 1] = lease_until
          leases[#leases + 1] = id
          note_lease(lease_until)
          fair_push(running, best.t, id)
          local nb = tonumber(f[14])
          if not nb or nb <= now then nb = 0 end
          emit(id, did, f, lease_until, route_partition(rt, f[9], id), nb)
        elseif parked >= GATE_CHUNK then
          break
        end
      end
    end
    settle_sets(false)
    for _, x in ipairs(ten) do
      if x.dirty then
        redis.call('HSET', vk, x.t, x.vt)
        if best_head(x) then redis.call('ZADD', ak, x.vt, x.t) else fair_deactivate(pool, x.t) end
      end
    end
    if vnow > vnow0 then redis.call('SET', PP .. ':vnow', vnow) end
  end

  -- 5c. Lease-ahead (3a), after the jobs ready now. Only jobs no gate
  -- decides on go ahead, so flow control decides on the others at their due
  -- time (3): no concurrency key; a tenant without dispatch rate limits, a
  -- breaker not closed or max_running; a queue its tenant has not paused; a
  -- type a live worker takes; no not_after before the due time. Each is
  -- charged to its tenant's virtual time as a dispatch in 5 is (settled by
  -- its completion), so scheduling ahead buys no share.
  local ahead_full, ahead_n = false, 0
  local ahead_leases, ahead_nbs, ahead_running, ahead_tdel = {}, {}, {}, {}
  -- may_go_ahead: job fields f (the read in lease_ahead) due at nb may be
  -- leased ahead.
  local function may_go_ahead(f, nb)
    if f[1] ~= 'delayed' or f[12] ~= pool or (f[10] or '') ~= '' or not route_ok(rt, f[9]) then return false end
    local na = tonumber(f[2])
    if na and na <= nb then return false end
    local t = f[4] or ''
    local c = tenant_settings(t)
    if c.max > 0 or c.rg == '1' or c.bg == '1' then return false end
    return not paused_queue(c, t, f[11] or 'default')
  end
  -- lease_ahead leases the jobs of delayed set dk due by horizon that may go
  -- ahead, while the holds have room and the step's batch is not full; true
  -- when more may go at once (the step asks to run again).
  local function lease_ahead(dk, horizon)
    local soon = redis.call('ZRANGEBYSCORE', dk, '(' .. now, horizon, 'WITHSCORES', 'LIMIT', 0, 1000)
    local went, stopped = {}, false
    for k = 1, #soon, 2 do
      if ahead_room <= 0 or ahead_n >= maxb then
        stopped = true
        break
      end
      local id, nb = soon[k], tonumber(soon[k + 1])
      local jk = P .. 'job:' .. id
      local f = redis.call('HMGET', jk, 'state', 'na', 'attempt', 'tenant', 'created', 'ready', 'spec', 'tp', 'type',
        'ck', 'queue', 'pool')
      if f[1] ~= 'delayed' then
        went[#went + 1] = id -- a stale entry
      elseif may_go_ahead(f, nb) then
        went[#went + 1] = id
        local t = f[4] or ''
        local c = tenant_settings(t)
        local est = fair_charge(t, f[9], def_est)
        local m = pool .. '\n' .. t
        fair_vt_delta[m] = (fair_vt_delta[m] or 0) + est / c.w
        ahead_n, ahead_room = ahead_n + 1, ahead_room - 1
        local did, lease_until = didp .. '-a' .. ahead_n, nb + lease
        redis.call('HSET', jk, 'state', 'inflight', 'did', did, 'est', est, 'cw', c.w, 'nb', nb)
        ahead_leases[#ahead_leases + 1], ahead_leases[#ahead_leases + 2] = lease_until, id
        note_lease(lease_until)
        ahead_nbs[#ahead_nbs + 1], ahead_nbs[#ahead_nbs + 2] = nb, id
        fair_push(ahead_running, t, id)
        fair_push(ahead_tdel, fair_tq(pool, f[11] or 'default', t) .. ':delayed', id)
        emit(id, did, f, lease_until, route_partition(rt, f[9], id), nb)
      end
    end
    if #went > 0 then redis.call('ZREM', dk, unpack(went)) end
    return ahead_room > 0 and (stopped or (#soon == 2000 and #went > 0))
  end
  -- Ready work first: while jobs ready now wait (the pops of 5 stopped at
  -- the capacity, or there was none and a ready set is not empty), nothing
  -- is leased ahead, so leasing ahead never delays a job due now; the
  -- delayed jobs go once due, or ahead once the pool has caught up.
  local function ready_waiting()
    if cap > 0 then return not drained end
    for _, q in ipairs(queues) do
      if redis.call('ZCARD', P .. 'q:' .. q .. ':ready') > 0 then return true end
    end
    return false
  end
  if ahead_room > 0 and not ready_waiting() then
    for _, q in ipairs(queues) do
      -- A queue whose first delayed job is beyond the look-ahead (or that
      -- has none) has nothing to lease ahead.
      local first = delayed_first[q]
      if first == nil or (first and first <= now + ahead) then
        delayed_first[q] = nil
        if lease_ahead(P .. 'q:' .. q .. ':delayed', now + ahead) then ahead_full = true end
      end
      if ahead_room <= 0 or ahead_n >= maxb then break end
    end
    if ahead_n > 0 then
      fair_bulk('ZADD', inflight, ahead_leases)
      fair_bulk('ZADD', aheadk, ahead_nbs)
      for t, ids in pairs(ahead_running) do fair_bulk('SADD', P .. 'tenant:' .. t .. ':running', ids) end
      for k, ids in pairs(ahead_tdel) do fair_bulk('ZREM', k, ids) end
      fair_flush()
    end
  end

  if housekeeping then
    -- 5b. Parked jobs whose not_after passed expire as ready ones do.
    for _, id in ipairs(route_expiring(pool, now)) do
      local jk = P .. 'job:' .. id
      redis.call('HSET', jk, 'state', 'expiring')
      redis.call('ZADD', outbox, now + retry_ms, id)
      expired(jk, id)
    end

    -- 6. Expired jobs whose dlq record was not acknowledged in time: again.
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', outbox, '-inf', now, 'LIMIT', 0, 100)) do
      local jk = P .. 'job:' .. id
      if redis.call('HGET', jk, 'state') == 'expiring' then
        redis.call('ZADD', outbox, now + retry_ms, id)
        expired(jk, id)
      else
        redis.call('ZREM', outbox, id)
      end
    end
  end

  -- 7. When to look again: when the first delayed job of a queue enters the
  -- look-ahead, or, when it is in it already (it waits for its gates, 3a), is due.
  local next_due = -1
  for _, q in ipairs(queues) do
    local s = delayed_first[q]
    if s == nil then s = zfirst(P .. 'q:' .. q .. ':delayed') end
    if s then
      if s - ahead > now then s = s - ahead end
      if next_due < 0 or s < next_due then next_due = s end
    end
  end
  -- Holds full: look again when the first job leased ahead is due.
  if ahead > 0 and ahead_room <= 0 then
    local s = zfirst(aheadk)
    if s and (next_due < 0 or s < next_due) then next_due = s end
  end
  local gate_ms = gate_next_ms()
  if gate_ms >= 0 and (next_due < 0 or gate_ms < next_due) then next_due = gate_ms end
  local next_lease = first_lease or -1
  local more = 0
  if cap > 0 and popped == cap and cap == maxb then more = 1 end
  if parked >= GATE_CHUNK or rt.left or not route_room(rt) then more = 1 end

  if ahead_full then more = 1 end

  local res = {next_due, next_lease, #disp / 8, #exp / 8, more}
  for _, v in ipairs(disp) do res[#res + 1] = v end
  for _, v in ipairs(exp) do res[#res + 1] = v end
  -- Trailer (observability): the dispatched jobs' traceparents, in order, then
  -- the number of leases that expired in this step.
  for _, v in ipairs(tps) do res[#res + 1] = v end
  res[#res + 1] = lost
  -- Then the dispatched jobs' partitions, in order (-1: the job id's hash).
  for _, v in ipairs(parts) do res[#res + 1] = v end
  -- Then the dispatched jobs' not-before ms, in order (0: none, start at once).
  for _, v in ipairs(nbs) do res[#res + 1] = v end
  return res
end
