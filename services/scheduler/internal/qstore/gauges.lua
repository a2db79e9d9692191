-- gauges: a read-only snapshot of queue depths for metrics.
-- ARGV[1] key prefix, ARGV[2] max in-flight jobs to inspect, ARGV[3..] pools.
-- Returns {queues, running} where queues is a flat list of
--   pool, queue, ready count, delayed count, n, n ready times (RFC 3339)...
-- (the ready time of the first job of each priority band: the oldest ready
-- job is among them) and running is a flat list of pool, queue, tenant, count.
local P, maxin = ARGV[1], tonumber(ARGV[2])
local STEP, NORMAL = 1e14, 5e13
local queues, running = {}, {}
for a = 3, #ARGV do
  local pool = ARGV[a]
  local PP = P .. 'pool:' .. pool
  for _, q in ipairs(redis.call('SMEMBERS', PP .. ':queues')) do
    local rk = P .. 'q:' .. q .. ':ready'
    local n = redis.call('ZCARD', rk)
    local times = {}
    if n > 0 then
      for p = 0, 9 do
        for _, band in ipairs({{p * STEP, p * STEP + NORMAL - 1}, {p * STEP + NORMAL, (p + 1) * STEP - 1}}) do
          local ids = redis.call('ZRANGEBYSCORE', rk, band[1], band[2], 'LIMIT', 0, 1)
          if #ids > 0 then
            local t = redis.call('HGET', P .. 'job:' .. ids[1], 'ready')
            if t then times[#times + 1] = t end
          end
        end
      end
    end
    queues[#queues + 1] = pool
    queues[#queues + 1] = q
    queues[#queues + 1] = n
    queues[#queues + 1] = redis.call('ZCARD', P .. 'q:' .. q .. ':delayed')
    queues[#queues + 1] = #times
    for _, t in ipairs(times) do queues[#queues + 1] = t end
  end
  local counts, order = {}, {}
  for _, id in ipairs(redis.call('ZRANGE', PP .. ':inflight', 0, maxin - 1)) do
    local f = redis.call('HMGET', P .. 'job:' .. id, 'queue', 'tenant')
    local k = (f[1] or '') .. '\0' .. (f[2] or '')
    if not counts[k] then
      counts[k] = 0
      order[#order + 1] = {k, f[1] or '', f[2] or ''}
    end
    counts[k] = counts[k] + 1
  end
  for _, o in ipairs(order) do
    running[#running + 1] = pool
    running[#running + 1] = o[2]
    running[#running + 1] = o[3]
    running[#running + 1] = counts[o[1]]
  end
end
return {queues, running}
