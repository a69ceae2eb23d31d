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
-- shaping  last = the latest "at" of the bucket's windows; a window fits at
--           t0 + retry at t0 (t0 >= at); the commit records at = the turn,
--           d = the debt at the turn + cost * P; stats are taken at the later
--           of now and at, reset_ms adding the wait until at.
-- adjust    an extra charge commits at the later of now and the latest
--           "at" (read by check: no command more), d = the debt there +
--           cost * P, at most P * L.
-- Commands  one HMGET (every window), then HSET and PEXPIRE when admitted.

-- The debt of window w (its stored at0, d0) at time t >= at0.
local function gcra_debt_at(w, t)
  local at, d = w.at0, w.d0
  if not at or not d then return 0 end
  local elapsed = t - at
  if elapsed >= w.period then return 0 end
  local debt = d - elapsed * w.limit
  if debt < 0 then debt = 0 end
  return debt
end

MAKE_ALGORITHM.gcra = function() return {
  check = function(b)
    for w = 1, b.n do
      local win = b[w]
      if win.named_for ~= 'gcra' or win.named_limit ~= win.limit_s or win.named_period ~= win.period_s then
        name_fields(win, 'gcra', win.limit_s .. '/' .. win.period_s, ':at', ':d')
      end
    end
    local v = hmget(b, 2)
    local fits = true
    for w = 1, b.n do
      local win = b[w]
      local limit, period = win.limit, win.period
      local at, d = tonumber(v[2 * w - 1]), tonumber(v[2 * w])
      win.at0, win.d0 = at, d
      local debt = 0
      if at and d then
        local elapsed = now - at
        if elapsed < 0 then elapsed = 0 end
        if elapsed < period then
          debt = d - elapsed * limit
          if debt < 0 then debt = 0 end
        end
      end
      win.debt = debt
      -- debt - (L - cost) * P, not debt + cost * P - P * L: the sum could pass
      -- 2^53 and round; each term here stays within P * L.
      local over = debt - (limit - b.cost) * period
      if over <= 0 then
        win.retry = 0
      else
        win.retry = cdiv(over, limit)
        fits = false
      end
    end
    return fits
  end,

  commit = function(b)
    for w = 1, b.n do
      -- Windows with the same limit and period share their fields and debt.
      local win = b[w]
      -- At most a full window (only an extra charge of adjust() goes past
      -- it): the debt drains within one period, as load and the TTL assume.
      local debt, full = win.debt + b.cost * win.period, win.period * win.limit
      if debt > full then debt = full end
      win.debt = debt
      win.v1, win.v2 = slot_str(), num(debt)
    end
    b.committed_at = slot
    hset_expire(b, 2, commit_ttl(b))
  end,

  -- adjust(): from the debt, only if the decision at `at` is still the
  -- last admission (then taking units * P off is exactly the state without
  -- them); after a later one the debt may have drained to 0 in between, so
  -- nothing comes back.
  refund = function(b, at, units)
    local v = hmget(b, 2)
    local m = 0
    for w = 1, b.n do
      local win = b[w]
      local last, d = tonumber(v[2 * w - 1]), tonumber(v[2 * w])
      if last == at and d then
        d = d - units * win.period
        if d < 0 then d = 0 end
        ARGS[m + 1], ARGS[m + 2] = win.f2, num(d)
        m = m + 2
      end
    end
    if m > 0 then redis.call('HSET', b.key, unpack(ARGS, 1, m)) end
  end,

  -- adjust(): the latest "at" read by check, if later than now.
  charge_at = function(b)
    local c = now
    for w = 1, b.n do
      local win = b[w]
      if win.at0 and win.d0 and win.at0 > c then c = win.at0 end
    end
    return c
  end,

  last = function(b)
    for w = 1, b.n do
      local win = b[w]
      if win.named_for ~= 'gcra' or win.named_limit ~= win.limit_s or win.named_period ~= win.period_s then
        name_fields(win, 'gcra', win.limit_s .. '/' .. win.period_s, ':at', ':d')
      end
    end
    local v = hmget(b, 2)
    local last = 0
    for w = 1, b.n do
      local win = b[w]
      win.at0, win.d0 = tonumber(v[2 * w - 1]), tonumber(v[2 * w])
      if win.at0 and win.d0 and win.at0 > last then last = win.at0 end
    end
    return last
  end,

  earliest = function(b, w, t0)
    local over = gcra_debt_at(w, t0) - (w.limit - b.cost) * w.period
    if over <= 0 then return t0 end
    return t0 + cdiv(over, w.limit)
  end,

  -- Before a shaped commit: the debt at the turn.
  at_slot = function(b)
    for w = 1, b.n do b[w].debt = gcra_debt_at(b[w], slot) end
  end,

  shaped_stats = function(b, w)
    local from, debt = now, 0
    if b.committed then
      from, debt = b.committed_at, w.debt
    elseif w.at0 and w.d0 then
      if w.at0 > now then from = w.at0 end
      debt = gcra_debt_at(w, from)
    end
    return idiv(w.period * w.limit - debt, w.period), from - now + cdiv(debt, w.limit)
  end,

  stats = function(b, w)
    return idiv(w.period * w.limit - w.debt, w.period), cdiv(w.debt, w.limit)
  end,
} end
