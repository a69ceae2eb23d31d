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

-- The smallest e in [0, P) with prev * (P - e) <= room * P, or nil.
local function sw_fit_offset(prev, room, period)
  if room < 0 then return nil end
  if prev == 0 then return 0 end
  local e = period - idiv(room * period, prev)
  if e < 0 then e = 0 end
  if e < period then return e end
  return nil
end

ALGORITHMS.sw = {
  load = function(b)
    for _, w in ipairs(b.windows) do
      w.field = num(w.period)
      w.k = idiv(now, w.period)
      local v = redis.call('HMGET', b.key, w.field .. ':k', w.field .. ':c', w.field .. ':p')
      local sk, sc, sp = tonumber(v[1]), tonumber(v[2]) or 0, tonumber(v[3]) or 0
      w.cur, w.prev = 0, 0
      if sk == w.k then
        w.cur, w.prev = sc, sp
      elseif sk and sk + 1 == w.k then
        w.prev = sc
      end
    end
  end,

  retry = function(b, w)
    local period, limit = w.period, w.limit
    local prev = math.min(w.prev, limit)
    local e = now - w.k * period
    local room = limit - w.cur - b.cost
    if room >= 0 and prev * (period - e) <= room * period then return 0 end
    local at
    local e0 = sw_fit_offset(prev, room, period)
    if e0 then
      at = w.k * period + e0
    else
      local e1 = sw_fit_offset(math.min(w.cur, limit), limit - b.cost, period)
      if e1 then at = (w.k + 1) * period + e1 else at = (w.k + 2) * period end
    end
    local retry = at - now
    if retry < 1 then retry = 1 end
    return retry
  end,

  commit = function(b)
    local args = {}
    for _, w in ipairs(b.windows) do
      -- Windows with the same period share their fields and counts.
      w.cur = w.cur + b.cost
      args[#args + 1] = w.field .. ':k'
      args[#args + 1] = num(w.k)
      args[#args + 1] = w.field .. ':c'
      args[#args + 1] = num(w.cur)
      args[#args + 1] = w.field .. ':p'
      args[#args + 1] = num(w.prev)
    end
    redis.call('HSET', b.key, unpack(args))
    redis.call('PEXPIRE', b.key, num(2 * b.max_period + ttl_slack))
  end,

  stats = function(b, w)
    local period, limit = w.period, w.limit
    local prev = math.min(w.prev, limit)
    local e = now - w.k * period
    local remaining = limit - w.cur - cdiv(prev * (period - e), period)
    if remaining < 0 then remaining = 0 end
    local reset = 0
    if w.cur > 0 then
      reset = (w.k + 2) * period - now
    elseif prev > 0 then
      reset = (w.k + 1) * period - now
    end
    return remaining, reset
  end,
}
