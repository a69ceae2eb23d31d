-- lease(KEYS, ARGV[, once]): ends or renews leases that decisions recorded
-- (model: Model::lease in src/limiter/model/mod.rs; the lease sets:
-- lease.lua). A request that ends gives its lease back; one that goes on
-- longer than its lease's TTL renews it.
--
-- KEYS[i]   the lease set of op i (its lease check's key); all in one hash
--           slot, a key may repeat.
-- ARGV[1]   now, as for decide().
-- ARGV[2i], ARGV[2i + 1]
--           op i: what happens, then the lease id (1..64 bytes of
--           [0-9A-Za-z:._-], as its decision's "lease=<id>"):
--             "-"          end: the lease is removed.
--             "+<ttl_ms>"  renew: a live lease (expiry > now) expires at
--                          now + ttl_ms (decimal digits, now + ttl_ms below
--                          2^53), and its key lives at least that long.
--           A lease gone or expired stays gone (an expired one still
--           stored is removed). The ops run in order.
-- Reply     { now_ms, then per op 1|0 }: 1 = the lease was live (and was
--           ended or renewed by this call).
-- Errors    "ERR tollgate: ..." on malformed arguments, before any write.
-- Commands  per op ZSCORE, then ZREM (an end of a stored lease, or a
--           renewal of an expired one) or ZADD (a renewal); per key renewed
--           PTTL, and PEXPIRE if the key would expire before its latest
--           renewed lease. An end: 2; a renewal: 3, or 4 (the usual case:
--           the new expiry is the set's latest).

-- The ttl_ms of op "+<ttl_ms>" at now, or nil if it is not one.
local function renewal_ms(op)
  if string.byte(op, 1) ~= 43 or not string.find(op, '^%d+$', 2) then return nil end -- '+'
  local ms = tonumber(string.sub(op, 2))
  if now + ms >= 9007199254740992 then return nil end
  return ms
end

local function lease(KEYS, ARGV, once)
  if once then config_room = 0 end
  if not read_clock(ARGV[1]) then
    return redis.error_reply('ERR tollgate: bad now')
  end
  local ops = #KEYS
  if #ARGV ~= 1 + 2 * ops then
    return redis.error_reply('ERR tollgate: argument count does not match KEYS')
  end
  for i = 1, ops do
    local op = ARGV[2 * i]
    if op ~= '-' and not renewal_ms(op) then
      return redis.error_reply('ERR tollgate: bad lease op for key ' .. i)
    end
    if not lease_id_ok(ARGV[2 * i + 1]) then
      return redis.error_reply('ERR tollgate: bad lease id for key ' .. i)
    end
  end

  -- Per key renewed (in `renewed`, in order): the latest expiry given.
  local reply, renewed, until_ = { now }, {}, {}
  for i = 1, ops do
    local key, op, id = KEYS[i], ARGV[2 * i], ARGV[2 * i + 1]
    local expiry = tonumber(redis.call('ZSCORE', key, id))
    local live = expiry ~= nil and expiry > now
    if live and op ~= '-' then
      local to = now + renewal_ms(op)
      redis.call('ZADD', key, num(to), id)
      if not until_[key] then
        renewed[#renewed + 1] = key
        until_[key] = to
      elseif to > until_[key] then
        until_[key] = to
      end
    elseif expiry then
      redis.call('ZREM', key, id)
    end
    reply[i + 1] = live and 1 or 0
  end

  -- The key outlives every lease: it is made to live until its latest
  -- renewed lease's expiry when it would expire sooner (never shortened).
  for j = 1, #renewed do
    local key = renewed[j]
    local ms = until_[key] - now
    if ms > 0 then
      local pttl = redis.call('PTTL', key)
      if pttl ~= -2 and pttl < ms + ttl_slack then redis.call('PEXPIRE', key, ttl(ms)) end
    end
  end
  return reply
end
