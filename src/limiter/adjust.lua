-- adjust(KEYS, ARGV[, once]): changes what requests already decided
-- recorded (model: Model::adjust in src/limiter/model/mod.rs). It undoes a
-- request (to = 0: the second step of a decision across shards), settles a
-- reservation with the actual cost, or charges a cost known only from the
-- response.
--
-- KEYS[i]   the bucket, as for decide().
-- ARGV[1]   now, as for decide().
-- ARGV[2]   at: the now_ms of the decision that recorded what changes (its
--           reply's second item: the store's clock); for a shaped
--           admission, its turn (now_ms + delay_ms: a held request that
--           went away gives its turn back, from its cost to 0).
-- ARGV[3..] for each key, in KEYS order: algorithm, from, to, n, then n
--           pairs limit, period_ms. `from`: the units the decision
--           recorded (0 if it only checked); `to`: the units it should
--           have recorded (0 to 2^32). A lease key's algorithm is
--           "lease=<id>" as in its decision, with one window: to < from
--           ends the lease (ZREM of the id), to > from records it at now
--           as a decision's commit would (lease.lua). An algorithm marked
--           "@" (as in its decision) has its override key after all the
--           buckets in KEYS, as for decide(): the limits in force are the
--           override's (overrides.lua; they bound the log's extra charge
--           and gcra's debt, and name gcra's fields).
-- Per bucket, after the usual housekeeping:
--   to > from  an extra charge: to - from units are recorded at c = the
--              later of now and the bucket's last turn (charge_at: the
--              log's newest entry, gcra's latest "at", the counters' field
--              "s"), as a commit at c that checks nothing (the log records
--              at most its largest limit; a gcra debt at most a full
--              window): the state read at c, gcra's at = c, the counters'
--              "s" written when c > now, as a shaped commit does. A turn a
--              shaped call gave in the future keeps its record, and later
--              turns come after the charge. The key's TTL is its longest
--              period after c, never shorter than a record still stored
--              needs. With no turn after now, c = now: as a decision's
--              commit (the counters read "s" in the same HMGET; the log
--              counts its entries after now unless a window counted none).
--   to < from  a refund: from - to units come back from the decision's own
--              record, where it can still be told apart (each algorithm's
--              refund() says where); otherwise nothing comes back, so a
--              refund never frees more than the decision took.
-- Reply     as decide()'s: { 1, now_ms, then remaining, reset_ms, 0 per
--           window } (a marked check: { overridden, then limit,
--           remaining, reset_ms, 0 per window }), the state after the
--           change; a bucket charged at c > now reports as a shaped call
--           does (at now, counting its records at future turns).
-- Errors    "ERR tollgate: ..." on malformed arguments.
-- Commands  a decision's check and commit or refund per bucket, and one
--           HMGET per marked check.

-- An amount of units (from, to): an integer in [0, 2^32].
local function units_of(s)
  local x = config_number(s)
  if not x or x < 0 or x > 4294967296 or x % 1 ~= 0 then return nil end
  return x
end

-- Changes bucket b from b.from to b.to units (as above) for a decision
-- made at `at`, and readies it for report(): b.later when it was charged
-- at a turn later than now. flush() charges through it too.
local function change(b, at)
  local algorithm = b.algorithm
  local charge = b.to > b.from
  -- Reads the state (and keeps house), as phase 1 of a decision of 1 unit
  -- (and, before a charge, the counters' last turn in the same HMGET).
  b.cost = 1
  algorithm.check(b, nil, charge)
  b.committed, b.later = false, false
  if charge then
    local units = b.to - b.from
    if algorithm.max_charge then units = algorithm.max_charge(b, units) end
    -- A commit at c = the later of now and the bucket's last turn, as a
    -- shaped commit at c: the state read at c, the TTL from c, the
    -- counters' "s" noted when c > now.
    local c = algorithm.charge_at(b)
    if c > now then
      slot, b.later = c, true
      if algorithm.at_slot then algorithm.at_slot(b) end
    end
    b.cost, b.committed = units, true
    algorithm.commit(b)
    slot = now
  elseif b.to < b.from then
    if not algorithm.refund(b, at, b.from - b.to) then algorithm.check(b) end
  end
  for w = 1, b.n do b[w].retry = 0 end
end

-- Reads bucket i (key `key`) from ARGV[a..]: algorithm, then `from` (when
-- with_from: adjust()), to, n, then n pairs limit, period_ms; sets b.from
-- (0 without it) and b.to. A lease key ("lease=<id>", one window) and the
-- "@" marker only with_from: flush() records no leases and reads no
-- overrides. The index past it and whether it is marked, or nil and the
-- error reply.
local function read_change(i, key, ARGV, a, with_from)
  local arg, mark, exact = unmarked(ARGV[a])
  local algorithm, id = algorithm_for(arg), nil
  local from = 0
  if with_from then
    from = units_of(ARGV[a + 1])
    a = a + 1
  elseif mark then
    return nil, redis.error_reply('ERR tollgate: flush reads no overrides ("@", key ' .. i .. ')')
  end
  local to, n = units_of(ARGV[a + 1]), config_number(ARGV[a + 2])
  if not algorithm then
    if not with_from then
      return nil, redis.error_reply('ERR tollgate: unknown algorithm for key ' .. i)
    end
    algorithm, id = lease_arg(arg, i)
    if not algorithm then return nil, id end
  end
  if not from or not to or not n or n < 1 or n % 1 ~= 0 then
    return nil, redis.error_reply('ERR tollgate: bad units or window count for key ' .. i)
  end
  if id and n ~= 1 then
    return nil, redis.error_reply('ERR tollgate: a lease key takes one window (key ' .. i .. ')')
  end
  local b, next_or_error = read_bucket(i, key, algorithm, n, ARGV, a + 3)
  if not b then
    return nil, next_or_error
  end
  b.from, b.to, b.marked, b.exact, b.id = from, to, mark, exact, id
  return next_or_error, mark
end

local function adjust(KEYS, ARGV, once)
  if once then config_room = 0 end
  if not read_clock(ARGV[1]) then
    return redis.error_reply('ERR tollgate: bad now')
  end
  local at = tonumber(ARGV[2])
  if not at or at < 0 or at % 1 ~= 0 then
    return redis.error_reply('ERR tollgate: bad at')
  end

  local argc, a, keys, marked = #ARGV, 3, 0, 0
  while a <= argc do
    keys = keys + 1
    local next_a, mark_or_err = read_change(keys, KEYS[keys], ARGV, a, true)
    if not next_a then return mark_or_err end
    if mark_or_err then marked = marked + 1 end
    a = next_a
  end
  if keys + marked ~= #KEYS then
    return redis.error_reply('ERR tollgate: argument count does not match KEYS')
  end
  if marked > 0 then apply_overrides(KEYS, keys) end

  for i = 1, keys do change(BUCKETS[i], at) end
  return report(keys, true, 'later', marked)
end
