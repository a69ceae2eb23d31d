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
-- Commands  one HGETALL per distinct override key of the call (none for
--           unmarked checks); the hash is never written here.

-- 10^12: the largest limit an override may set.
local OVERRIDE_MAX = 1000000000000

-- The limit field value s, or nil if it is not a usable one (above).
local function override_limit(s)
  if type(s) ~= 'string' or #s > 13 or not string.find(s, '^[1-9]%d*$') then return nil end
  local x = tonumber(s)
  if x > OVERRIDE_MAX then return nil end
  return x
end

-- The live override of key k as a table field -> value, or false (none,
-- expired, or an unusable "until"). `seen`: the keys this call read.
local function read_override(k, seen)
  local o = seen[k]
  if o ~= nil then return o end
  local flat = redis.call('HGETALL', k)
  o = false
  if #flat > 0 then
    o = {}
    for j = 1, #flat, 2 do o[flat[j]] = flat[j + 1] end
    local u = o['until']
    if u ~= nil and not (#u <= 16 and string.find(u, '^%d+$') and now < tonumber(u)) then o = false end
  end
  seen[k] = o
  return o
end

-- Applies override o (a table, or false) to bucket b: b.overridden when it
-- set the limit of at least one window.
local function apply_override(b, o)
  b.overridden = false
  if not o then return end
  if b.id then
    local s = o.c
    local c = override_limit(s)
    if c then
      b[1].limit, b[1].limit_s, b.overridden = c, s, true
    end
    return
  end
  for w = 1, b.n do
    local win = b[w]
    local s = o['w' .. win.period_s]
    local x = override_limit(s)
    if x and not (b.exact and x > idiv(9007199254740992, win.period)) then
      win.limit, win.limit_s, b.overridden = x, s, true
    end
  end
end

-- Applies the overrides of the first `keys` buckets' marked ones, whose
-- override keys are KEYS[keys + 1..] in order.
local function apply_overrides(KEYS, keys)
  local seen, j = {}, keys
  for i = 1, keys do
    local b = BUCKETS[i]
    if b.marked then
      j = j + 1
      apply_override(b, read_override(KEYS[j], seen))
    end
  end
end

-- Algorithm argument s of a check: without its "@" marker, and whether it
-- had one (then also whether the algorithm needs limit * period <= 2^53).
local function unmarked(s)
  if string.byte(s or '', 1) ~= 64 then return s, false, false end -- '@'
  s = string.sub(s, 2)
  return s, true, s == 'gcra' or s == 'sw'
end
