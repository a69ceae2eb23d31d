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
-- shaping  (COUNTER_SHAPING in prelude.lua) the last turn in field "s"; a
--           window fits at t0 + retry at t0; the commit counts in the
--           turn's window, TTL = longest period after the turn; stats at
--           the later of now and the last turn.
-- adjust    an extra charge reads "s" in its HMGET and commits at the
--           later of now and it (the state read there).
-- Commands  one HMGET (every window), then HSET and PEXPIRE when admitted.

MAKE_ALGORITHM.fw = function() return {
  -- The state at t (default now); with `charge`, the last turn too.
  check = function(b, t, charge)
    t = t or now
    for w = 1, b.n do
      local win = b[w]
      name_fields(win, 'fw', win.period_s, ':k', ':c')
      win.k = idiv(t, win.period)
    end
    local v = hmget(b, 2, charge)
    if charge then b.last0 = tonumber(v[2 * b.n + 1]) or 0 end
    local fits = true
    for w = 1, b.n do
      local win = b[w]
      local count = 0
      if tonumber(v[2 * w - 1]) == win.k then count = tonumber(v[2 * w]) or 0 end
      win.count = count
      if count + b.cost <= win.limit then
        win.retry = 0
      else
        win.retry = (win.k + 1) * win.period - t
        fits = false
      end
    end
    return fits
  end,

  commit = function(b)
    for w = 1, b.n do
      -- Windows with the same period share their fields and count.
      local win = b[w]
      local count = win.count + b.cost
      if count > STATE_MAX then count = STATE_MAX end -- adjust() charges only
      win.count = count
      win.v1, win.v2 = num(win.k), num(count)
    end
    hset_expire(b, 2, commit_ttl(b))
    note_slot(b)
  end,

  last = COUNTER_SHAPING.last,
  earliest = COUNTER_SHAPING.earliest,
  at_slot = COUNTER_SHAPING.at_slot,
  restat = COUNTER_SHAPING.restat,
  charge_at = COUNTER_SHAPING.charge_at,

  -- The state was read at b.stats_at (at_slot, restat): reset counts from now.
  shaped_stats = function(b, w)
    local remaining = w.limit - w.count
    if remaining < 0 then remaining = 0 end
    local reset = 0
    if w.count > 0 then reset = (w.k + 1) * w.period - now end
    return remaining, reset
  end,

  -- adjust(): from the count of `at`'s window, if that is still the one
  -- counted.
  refund = function(b, at, units)
    local v = hmget(b, 2)
    local m = 0
    for w = 1, b.n do
      local win = b[w]
      local k, c = tonumber(v[2 * w - 1]), tonumber(v[2 * w])
      if c and k == idiv(at, win.period) then
        c = c - units
        if c < 0 then c = 0 end
        ARGS[m + 1], ARGS[m + 2] = win.f2, num(c)
        m = m + 2
      end
    end
    if m > 0 then redis.call('HSET', b.key, unpack(ARGS, 1, m)) end
  end,

  stats = function(b, w)
    local remaining = w.limit - w.count
    if remaining < 0 then remaining = 0 end
    local reset = 0
    if w.count > 0 then reset = (w.k + 1) * w.period - now end
    return remaining, reset
  end,
} end
