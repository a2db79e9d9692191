-- apply_dispatch: an apply call, then, in the same call, a dispatch step of
-- each offered pool the apply woke. A job submitted alone cost two calls:
-- the apply of its enqueued record, then the step of the dispatch loop
-- that apply woke, a goroutine hop and a round trip later
-- (docs/performance.md, Round 22).
-- ARGV: an apply call's arguments (apply.lua), then the 15 arguments of a
-- dispatch step (dispatch.lua) per offered pool, their epoch check off (the
-- apply checked it in this call) and their housekeeping too (the loops'
-- steps keep doing it), then the count of the apply arguments.
-- Returns {apply reply, then per pool stepped: pool, its dispatch reply}.
local DISPATCH_ARITY = 15

-- woke reports whether an apply reply's wake field ('*', or pools
-- separated by spaces) names pool.
local function woke(wake, pool)
  return wake == '*' or string.find(' ' .. wake .. ' ', ' ' .. pool .. ' ', 1, true) ~= nil
end

local function apply_dispatch_run(a)
  local last = tonumber(a[#a])
  local applied = apply_run(a, last)
  if applied.err then return applied end
  local out = {applied}
  for i = last + 1, #a - DISPATCH_ARITY, DISPATCH_ARITY do
    local pool = a[i + 1]
    if woke(applied[1], pool) then
      local d = {}
      for j = 1, DISPATCH_ARITY do d[j] = a[i + j - 1] end
      out[#out + 1] = pool
      out[#out + 1] = dispatch_run(d)
    end
  end
  return out
end
