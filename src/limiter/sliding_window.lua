-- Algorithm "sw": the sliding-window counter (model:
-- src/limiter/model/sliding_window.rs).
--
-- Windows [kP, (k+1)P); at now (e = now - kP into window k) the estimate is
-- cur + prev * (P - e) / P, compared in exact integer form.
-- Bucket    a hash; per distinct period P: fields "<P>:k" (index of the
--           window last counted in), "<P>:c" (its count), "<P>:p" (the
--           count of the window before it).
-- load      k = floor(now / P); stored k: (cur, prev) = (c, p); stored
--           k - 1: (0, c); else (0, 0). prev is capped at limit.
-- check     room = limit - cur - cost; fits when room >= 0 and
--           prev * (P - e) <= room * P; else retry = the first ms it fits:
--           in window k, else k + 1 (prev = min(cur, limit), room = limit -
--           cost), else the start of k + 2.
-- commit    cur = cur + cost; TTL = 2 * longest period.
-- stats     remaining = limit - cur - ceil(prev * (P - e) / P) (>= 0); reset =
--           end of window k + 1 if cur > 0, end of k if prev > 0, else 0.
-- shaping  (COUNTER_SHAPING in prelude.lua) the last turn in field "s"; a
--           window fits at t0 + retry at t0; the commit counts in the
--           turn's window, TTL = twice the longest period after the turn;
--           stats at the later of now and the last turn.
-- adjust    an extra charge reads "s" in its HMGET and commits at the
--           later of now and it (the state read there).
-- Commands  one HMGET (every window), then HSET and PEXPIRE when admitted.

-- The smallest e in [0, P) with prev * (P - e) <= room * P, or nil.
local function sw_fit_offset(prev, room, period)
  if room < 0 then return nil end
  if prev == 0 then return 0 end
  local e = period - idiv(room * period, prev)
  if e < 0 then e = 0 end
  if e < period then return e end
  return nil
end

-- Stats of window w at time t: reset counts from now.
local function sw_stats(w, t)
  local period, limit = w.period, w.limit
  local prev = math.min(w.prev, limit)
  local e = t - w.k * period
  local remaining = limit - w.cur - cdiv(prev * (period - e), period)
  if remaining < 0 then remaining = 0 end
  local reset = 0
  if w.cur > 0 then
    reset = (w.k + 2) * period - now
  elseif prev > 0 then
    reset = (w.k + 1) * period - now
  end
  return remaining, reset
end

MAKE_ALGORITHM.sw = function() return {
  -- The state at t (default now); with `charge`, the last turn too.
  check = function(b, t, charge)
    t = t or now
    for w = 1, b.n do
      local win = b[w]
      name_fields(win, 'sw', win.period_s, ':k', ':c', ':p')
      win.k = idiv(t, win.period)
    end
    local v = hmget(b, 3, charge)
    if charge then b.last0 = tonumber(v[3 * b.n + 1]) or 0 end
    local fits = true
    for w = 1, b.n do
      local win = b[w]
      local period, limit = win.period, win.limit
      local sk, sc, sp = tonumber(v[3 * w - 2]), tonumber(v[3 * w - 1]) or 0, tonumber(v[3 * w]) or 0
      local cur, prev = 0, 0
      if sk == win.k then
        cur, prev = sc, sp
      elseif sk and sk + 1 == win.k then
        prev = sc
      end
      win.cur, win.prev = cur, prev
      local capped = math.min(prev, limit)
      local e = t - win.k * period
      local room = limit - cur - b.cost
      if room >= 0 and capped * (period - e) <= room * period then
        win.retry = 0
      else
        local at
        local e0 = sw_fit_offset(capped, room, period)
        if e0 then
          at = win.k * period + e0
        else
          local e1 = sw_fit_offset(math.min(cur, limit), limit - b.cost, period)
          if e1 then at = (win.k + 1) * period + e1 else at = (win.k + 2) * period end
        end
        local retry = at - t
        if retry < 1 then retry = 1 end
        win.retry = retry
        fits = false
      end
    end
    return fits
  end,

  commit = function(b)
    for w = 1, b.n do
      -- Windows with the same period share their fields and counts.
      local win = b[w]
      win.cur = win.cur + b.cost
      if win.cur > STATE_MAX then win.cur = STATE_MAX end -- adjust() charges only
      win.v1, win.v2, win.v3 = num(win.k), num(win.cur), num(win.prev)
    end
    hset_expire(b, 3, 2 * b.max_period + slot - now)
    note_slot(b)
  end,

  last = COUNTER_SHAPING.last,
  earliest = COUNTER_SHAPING.earliest,
  at_slot = COUNTER_SHAPING.at_slot,
  restat = COUNTER_SHAPING.restat,
  charge_at = COUNTER_SHAPING.charge_at,
  shaped_stats = function(b, w) return sw_stats(w, b.stats_at) end,

  -- adjust(): from the count of `at`'s window: the stored current count
  -- if it is still that window, the stored previous one if it is the one
  -- before.
  refund = function(b, at, units)
    local v = hmget(b, 3)
    local m = 0
    for w = 1, b.n do
      local win = b[w]
      local k, c, p = tonumber(v[3 * w - 2]), tonumber(v[3 * w - 1]), tonumber(v[3 * w])
      local ka = idiv(at, win.period)
      if c and k == ka then
        c = c - units
        if c < 0 then c = 0 end
        ARGS[m + 1], ARGS[m + 2] = win.f2, num(c)
        m = m + 2
      elseif p and k and k == ka + 1 then
        p = p - units
        if p < 0 then p = 0 end
        ARGS[m + 1], ARGS[m + 2] = win.f3, num(p)
        m = m + 2
      end
    end
    if m > 0 then redis.call('HSET', b.key, unpack(ARGS, 1, m)) end
  end,

  stats = function(b, w) return sw_stats(w, now) end,
} end
