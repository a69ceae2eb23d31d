-- Algorithm "gcra": generic cell rate algorithm, one theoretical arrival
-- time per window (model: src/limiter/model/gcra.rs).
--
-- Time inside a window of limit L per P ms is counted in units of 1/L ms: a
-- unit costs P (the emission interval P/L ms), the window holds P * L, and
-- the debt is (TAT - now) * L. Every product is at most P * L <= 2^53.
-- Bucket    a hash; per distinct window "<L>/<P>": fields "<L>/<P>:at" (ms of
--           the last admission) and "<L>/<P>:d" (the debt then).
-- load      debt = 0 if no state or now - at >= P, else
--           max(0, d - max(0, now - at) * L).
-- check     fits when debt <= (L - cost) * P, else
--           retry = ceil((debt - (L - cost) * P) / L).
-- commit    at = now, d = debt + cost * P; TTL = longest period.
-- stats     remaining = floor((P * L - debt) / P); reset = ceil(debt / L).

ALGORITHMS.gcra = {
  load = function(b)
    for _, w in ipairs(b.windows) do
      w.field = num(w.limit) .. '/' .. num(w.period)
      local v = redis.call('HMGET', b.key, w.field .. ':at', w.field .. ':d')
      local at, d = tonumber(v[1]), tonumber(v[2])
      w.debt = 0
      if at and d then
        local elapsed = now - at
        if elapsed < 0 then elapsed = 0 end
        if elapsed < w.period then
          w.debt = d - elapsed * w.limit
          if w.debt < 0 then w.debt = 0 end
        end
      end
    end
  end,

  retry = function(b, w)
    -- debt - (L - cost) * P, not debt + cost * P - P * L: the sum could pass
    -- 2^53 and round; each term here stays within P * L.
    local over = w.debt - (w.limit - b.cost) * w.period
    if over <= 0 then return 0 end
    return cdiv(over, w.limit)
  end,

  commit = function(b)
    local args = {}
    for _, w in ipairs(b.windows) do
      -- Windows with the same limit and period share their fields and debt.
      w.debt = w.debt + b.cost * w.period
      args[#args + 1] = w.field .. ':at'
      args[#args + 1] = num(now)
      args[#args + 1] = w.field .. ':d'
      args[#args + 1] = num(w.debt)
    end
    redis.call('HSET', b.key, unpack(args))
    redis.call('PEXPIRE', b.key, num(b.max_period + ttl_slack))
  end,

  stats = function(b, w)
    return idiv(w.period * w.limit - w.debt, w.period), cdiv(w.debt, w.limit)
  end,
}
