-- queues: a read-only listing of one tenant's queues, summed over pools.
-- ARGV[1] key prefix, ARGV[2] tenant, ARGV[3..] pools.
-- Returns a flat list of name, ready, delayed, running, paused ('1' or '0'),
-- n, n ready times (RFC 3339: the first job of each priority band, among
-- which is the oldest) per queue, by name.
local P, t = ARGV[1], ARGV[2]
local STEP, NORMAL = 1e14, 5e13
local pausedk = P .. 'tenant:' .. t .. ':paused'
local qs, names = {}, {}
local function get(q)
  if not qs[q] then
    qs[q] = {ready = 0, delayed = 0, running = 0, times = {}}
    names[#names + 1] = q
  end
  return qs[q]
end
for _, q in ipairs(redis.call('SMEMBERS', pausedk)) do get(q) end
for a = 3, #ARGV do
  local pool = ARGV[a]
  for _, q in ipairs(redis.call('SMEMBERS', P .. 'pool:' .. pool .. ':tq:' .. t)) do
    local k = P .. 'pool:' .. pool .. ':q:' .. q .. ':t:' .. t
    local e = get(q)
    local n = redis.call('ZCARD', k)
    e.ready = e.ready + n
    e.delayed = e.delayed + redis.call('ZCARD', k .. ':delayed')
    if n > 0 then
      -- The oldest ready job is the first of one of the priority bands.
      for p = 0, 9 do
        for _, band in ipairs({{p * STEP, p * STEP + NORMAL - 1}, {p * STEP + NORMAL, (p + 1) * STEP - 1}}) do
          local ids = redis.call('ZRANGEBYSCORE', k, band[1], band[2], 'LIMIT', 0, 1)
          if #ids > 0 then
            local r = redis.call('HGET', P .. 'job:' .. ids[1], 'ready')
            if r then e.times[#e.times + 1] = r end
          end
        end
      end
    end
  end
end
for _, id in ipairs(redis.call('SMEMBERS', P .. 'tenant:' .. t .. ':running')) do
  local q = redis.call('HGET', P .. 'job:' .. id, 'queue')
  if q then
    local e = get(q)
    e.running = e.running + 1
  end
end
table.sort(names)
local out = {}
for _, q in ipairs(names) do
  local e = qs[q]
  local paused = '0'
  if redis.call('SISMEMBER', pausedk, q) == 1 then paused = '1' end
  for _, v in ipairs({q, e.ready, e.delayed, e.running, paused, #e.times}) do out[#out + 1] = v end
  for _, v in ipairs(e.times) do out[#out + 1] = v end
end
return out
