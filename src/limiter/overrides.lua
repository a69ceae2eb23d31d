-- Per-key overrides (model: src/limiter/model/overrides.rs), read for the
-- checks marked "@" by decide(), peek() and adjust() (contract in
-- prelude.lua and adjust.lua).
--
-- Key       the override key of a bucket (key::override_key: the bucket's
--           key with its last ":<algorithm>" replaced by ":ovr", so in the
--           bucket's hash slot), written by `tollgate override set`.
-- Hash      fields read: "w<period_ms>" (the limit in force for the
--           check's windows of that period, the period as sent), "c" (a
--           lease check's one window: the concurrency limit in force),
--           "until" (ms since the Unix epoch: the override applies while
--           now < until, the call's clock; absent: no expiry). Other fields
--           ("at", "by", "note") are for people.
-- Valid     a limit is decimal digits without a leading zero, 1..10^12,
--           and for gcra and sliding_window (b.exact) at most
--           2^53 / period_ms; another value is ignored (the window keeps
--           the limit sent). An "until" that is not decimal digits (at most
--           16) makes the whole override not apply, as a past one.
-- Effect    the limit in force replaces limit and limit_s of the window
--           for the call: checking, recording and the reply. gcra names
--           its fields by limit/period, so an override (and its end)
--           starts gcra afresh in that window; the other algorithms keep
--           their counts (a window over a lowered limit denies until it
--           drains).
-- Commands  one HMGET per marked check (of "until" and its windows'
--           fields; none for unmarked checks); the hash is never written
--           here.

-- 10^12: the largest limit an override may set.
local OVERRIDE_MAX = 1000000000000

-- The limit field value s, or nil if it is not a usable one (above).
local function override_limit(s)
  if type(s) ~= 'string' or #s > 13 or not string.find(s, '^[1-9]%d*$') then return nil end
  local x = tonumber(s)
  if x > OVERRIDE_MAX then return nil end
  return x
end

-- The fields a lease check reads: its expiry, then its one limit.
local LEASE_FIELDS = { 'until', 'c' }

-- The fields bucket b reads (in a table kept on b, made again only when
-- its windows' periods change): "until", then "w<period_ms>" per window.
local function override_fields(b)
  if b.id then return LEASE_FIELDS end
  local f = b.ofields
  if not f then
    f = { 'until' }
    b.ofields = f
  end
  for w = 1, b.n do
    local win = b[w]
    if win.ofor ~= win.period_s then win.ofield, win.ofor = 'w' .. win.period_s, win.period_s end
    f[w + 1] = win.ofield
  end
  return f
end

-- Applies the override in hash k to bucket b: b.overridden when it set
-- the limit of at least one window. One HMGET of the fields b reads.
local function apply_override(b, k)
  b.overridden = false
  local got = redis.call('HMGET', k, unpack(override_fields(b), 1, b.n + 1))
  local u = got[1]
  if u and not (#u <= 16 and string.find(u, '^%d+$') and now < tonumber(u)) then return end
  for w = 1, b.n do
    local s = got[w + 1]
    if s then
      local x, win = override_limit(s), b[w]
      if x and not (b.exact and x > idiv(9007199254740992, win.period)) then
        win.limit, win.limit_s, b.overridden = x, s, true
      end
    end
  end
end

-- Applies the overrides of the first `keys` buckets' marked ones, whose
-- override keys are KEYS[keys + 1..] in order.
local function apply_overrides(KEYS, keys)
  local j = keys
  for i = 1, keys do
    local b = BUCKETS[i]
    if b.marked then
      j = j + 1
      apply_override(b, KEYS[j])
    end
  end
end

-- The algorithm arguments without their "@", by argument (not a lease's:
-- its id changes with every request).
local UNMARKED = {}

-- Algorithm argument s of a check: without its "@" marker, and whether it
-- had one (then also whether the algorithm needs limit * period <= 2^53).
local function unmarked(s)
  if string.byte(s or '', 1) ~= 64 then return s, false, false end -- '@'
  local u = UNMARKED[s]
  if not u then
    u = string.sub(s, 2)
    if #s <= 5 then UNMARKED[s] = u end
  end
  return u, true, u == 'gcra' or u == 'sw'
end
