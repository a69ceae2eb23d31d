-- Algorithm "fw": counters aligned to the window, as envoyproxy/ratelimit
-- counts (model: src/limiter/model/fixed_window.rs).
--
-- Bucket    a hash; per distinct period P: fields "<P>:k" (index of the
--           window last counted in, floor(ms / P)) and "<P>:c" (its count).
-- load      k = floor(now / P); count = c if the stored index is k, else 0.
-- check     fits when count + cost <= limit, else retry = (k + 1) * P - now,
--           the end of the window.
-- commit    count = count + cost; TTL = longest period.
-- stats     remaining = limit - count; reset = end of the window if
--           count > 0, else 0.

ALGORITHMS.fw = {
  load = function(b)
    for _, w in ipairs(b.windows) do
      w.field = num(w.period)
      w.k = idiv(now, w.period)
      local v = redis.call('HMGET', b.key, w.field .. ':k', w.field .. ':c')
      w.count = 0
      if tonumber(v[1]) == w.k then w.count = tonumber(v[2]) or 0 end
    end
  end,

  retry = function(b, w)
    if w.count + b.cost <= w.limit then return 0 end
    return (w.k + 1) * w.period - now
  end,

  commit = function(b)
    local args = {}
    for _, w in ipairs(b.windows) do
      -- Windows with the same period share their fields and count.
      w.count = w.count + b.cost
      args[#args + 1] = w.field .. ':k'
      args[#args + 1] = num(w.k)
      args[#args + 1] = w.field .. ':c'
      args[#args + 1] = num(w.count)
    end
    redis.call('HSET', b.key, unpack(args))
    redis.call('PEXPIRE', b.key, num(b.max_period + ttl_slack))
  end,

  stats = function(b, w)
    local remaining = w.limit - w.count
    if remaining < 0 then remaining = 0 end
    local reset = 0
    if w.count > 0 then reset = (w.k + 1) * w.period - now end
    return remaining, reset
  end,
}
