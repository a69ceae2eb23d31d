-- flush(KEYS, ARGV[, once]): a worker that decides synced rules locally
-- records, every interval, what it admitted per bucket since its last flush,
-- and reads the global state back (model: Model::flush in
-- src/limiter/model/flush.rs). One call per batch of keys of one hash slot.
--
-- KEYS[1..k]    the buckets, as for decide().
-- KEYS[k+i]     bucket i's syncer set: exactly KEYS[i] .. ':syncers' (a
--               sorted set: syncer name -> its expiry, the time its latest
--               flush plus its own horizon_ms, the latest it was given).
-- KEYS[2k+1]    the token key of the flush: exactly KEYS[1] .. ':flush:' ..
--               <name>, a name of 1..64 bytes (the proxy's series, e.g. its
--               syncer; key::flush_token_key), so a flush writes no other
--               key of the hash slot.
-- ARGV[1]       now, as for decide().
-- ARGV[2]       the token: 1..64 bytes unique per flush. A worker whose reply
--               was lost sends the same token, keys and units again.
-- ARGV[3]       the syncer: 1..64 bytes naming the worker (the same for all
--               its flushes).
-- ARGV[4]       horizon_ms: this syncer's horizon: it counts as active for
--               this long after this flush (an integer in [1, 2^53)), or
--               longer if an earlier flush of its gave it a later expiry.
-- ARGV[5..]     for each bucket, in KEYS order: algorithm, units, n, then n
--               pairs limit, period_ms. units (0 to 2^32): what the worker
--               admitted in the bucket since its last flush (0: only read).
-- Behaviour     If the token key holds the token, the flush was applied
--               already: nothing is recorded. Else units are recorded in each
--               bucket as adjust()'s extra charge (from 0: at now, or the
--               bucket's last turn if later; checking nothing, with its
--               caps), and the token key is set to the token for the
--               longest period of all buckets: a flush resent later is not
--               recognised (and would be counted again).
--               In both cases each syncer set notes the syncer, as member
--               '~' .. syncer, until now + horizon_ms (an expiry it already
--               has that is later stays: a short owed flush never shortens
--               a synced one's), drops the syncers whose expiry is now or
--               earlier (each syncer stays for its own horizon, whoever
--               flushes), and lives until its latest member's expiry. A
--               member without '~' (written by an older version: its score
--               is its last flush) is active for horizon_ms after it.
-- Reply         { applied (1 = recorded now, 0 = applied before), now_ms,
--               then remaining, reset_ms, 0 per window (the state after,
--               as adjust()'s reply), then per bucket: syncers (active
--               syncers, this one included), rank (how many of them sort
--               before this one, bytewise: 0 <= rank < syncers) }
-- Errors        "ERR tollgate: ..." on malformed arguments, before any write
--               ("ERR tollgate: bad token key" for a token key not as above).
-- Commands      per syncer set ZREMRANGEBYSCORE, ZRANGE (WITHSCORES), ZREM
--               of each '~' member that expired less than a horizon ago,
--               ZADD unless the syncer's expiry is later already, PEXPIRE
--               (no ZADD GT: Redis 6 runs the script too).

-- A token or syncer name: 1 to 64 bytes.
local function short_name(s)
  return s and #s >= 1 and #s <= 64
end

-- Whether string a sorts before string b byte by byte (Lua's `<` follows
-- the server's locale).
local function bytes_before(a, b)
  local n = #a
  if #b < n then n = #b end
  for j = 1, n do
    local x, y = string.byte(a, j), string.byte(b, j)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- Notes `syncer` in the sorted set `key` until now + horizon unless its
-- expiry is later already, drops the syncers no longer active, and makes
-- the set live as long as its members need: the number of active syncers
-- and the rank of `syncer`. Members are written as '~' .. syncer, scored
-- by their expiry; a member without '~' was written by an older version,
-- scored by the time of its last flush, and stays active for this caller's
-- horizon after it (as that version reads it: a rollout mixes both).
local function note_syncer(key, syncer, horizon, horizon_s)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now - horizon))
  local me = '~' .. syncer
  local members = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local expiry = now + horizon
  local latest, count, rank, mine = expiry, 1, 0, nil
  for j = 1, #members, 2 do
    local name, score = members[j], tonumber(members[j + 1])
    local until_ = score
    if string.byte(name, 1) ~= 126 then until_ = score + horizon end
    if name == me then
      mine = score
    elseif until_ <= now then
      redis.call('ZREM', key, name)
    else
      count = count + 1
      if bytes_before(name, me) then rank = rank + 1 end
      if until_ > latest then latest = until_ end
    end
  end
  if not mine or mine < expiry then
    redis.call('ZADD', key, num(expiry), me)
  elseif mine > latest then
    latest = mine
  end
  if latest == expiry then
    redis.call('PEXPIRE', key, ttl(horizon, horizon_s))
  else
    redis.call('PEXPIRE', key, ttl(latest - now))
  end
  return count, rank
end

local function flush(KEYS, ARGV, once)
  if once then config_room = 0 end
  if not read_clock(ARGV[1]) then
    return redis.error_reply('ERR tollgate: bad now')
  end
  local token, syncer, horizon_s = ARGV[2], ARGV[3], ARGV[4]
  if not short_name(token) then
    return redis.error_reply('ERR tollgate: bad token')
  end
  if not short_name(syncer) then
    return redis.error_reply('ERR tollgate: bad syncer')
  end
  local horizon = tonumber(horizon_s)
  if not horizon or horizon < 1 or horizon >= 9007199254740992 or horizon % 1 ~= 0 then
    return redis.error_reply('ERR tollgate: bad horizon')
  end
  local keys = (#KEYS - 1) / 2
  if keys < 1 or keys % 1 ~= 0 then
    return redis.error_reply('ERR tollgate: KEYS must be buckets, their syncer sets, the token key')
  end
  local token_key, prefix = KEYS[2 * keys + 1], KEYS[1] .. ':flush:'
  local name_bytes = #token_key - #prefix
  if name_bytes < 1 or name_bytes > 64 or string.sub(token_key, 1, #prefix) ~= prefix then
    return redis.error_reply('ERR tollgate: bad token key')
  end

  local a = 5
  for i = 1, keys do
    if KEYS[keys + i] ~= KEYS[i] .. ':syncers' then
      return redis.error_reply('ERR tollgate: bad syncer set for key ' .. i)
    end
    local next_a, err = read_change(i, KEYS[i], ARGV, a, false)
    if not next_a then return err end
    a = next_a
  end
  if a ~= #ARGV + 1 then
    return redis.error_reply('ERR tollgate: argument count does not match KEYS')
  end

  local seen = redis.call('GET', token_key) == token
  local longest, longest_s = 0, nil
  for i = 1, keys do
    local b = BUCKETS[i]
    if seen then b.to = 0 end
    change(b, now)
    if b.max_period > longest then longest, longest_s = b.max_period, b.max_period_s end
  end
  if not seen then
    redis.call('SET', token_key, token, 'PX', ttl(longest, longest_s))
  end

  local reply = report(keys, true, 'later', 0)
  if seen then reply[1] = 0 end
  local r = #reply
  for i = 1, keys do
    local syncers, rank = note_syncer(KEYS[keys + i], syncer, horizon, horizon_s)
    reply[r + 1], reply[r + 2] = syncers, rank
    r = r + 2
  end
  return reply
end
