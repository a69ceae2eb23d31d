-- Algorithm "lease": a rule's concurrency limit, one lease per request in
-- flight (model: src/limiter/model/lease.rs).
--
-- Argument  a lease key's algorithm argument (decide's, adjust's) is
--           "lease=<id>", the id 1..64 bytes of [0-9A-Za-z:._-]: the member
--           the admission records, and what lease() ends or renews. Cost 1
--           (or "?1"), exactly one window: (limit, ttl_ms). The table is
--           not in MAKE_ALGORITHM: algorithm_for() misses on "lease=<id>"
--           and on a plain "lease", and only then lease_arg() reads it, so
--           the other algorithms pay nothing, and flush() (which never
--           calls lease_arg) refuses lease keys.
-- Bucket    a sorted set: member = lease id, score = its expiry in ms. A
--           lease is live while now < expiry.
-- load      when the earliest stored lease has expired, drop every lease
--           with expiry <= now: afterwards every stored lease is live.
--           When dry (peek) nothing is dropped: live leases are then
--           counted and ranked from expiry > now (b.lo), the same numbers.
-- check     live = the leases stored; fits when live + 1 <= limit, else
--           retry = the earliest expiry - now, at least 1 (a bound: a
--           request that ends frees one sooner).
-- commit    the lease id -> the turn + ttl (a lease already held under id
--           gets that expiry and still counts once); the key's TTL is then
--           the lease's (ttl after the turn), unless a live lease expires
--           later: the key outlives that one already.
-- stats     remaining = limit - live; reset = the latest live expiry - now
--           (0 if none). After a commit whose lease is the latest: ttl.
-- refund    (adjust, to < from) the lease id ends: ZREM.
-- shaping   a lease is never waited for: last = 0; earliest = t0 if a
--           lease is free now, else NEVER: shape() denies at once, the
--           window's retry being its unshaped one. Admitted at a turn, the
--           lease expires at the turn + ttl.
-- adjust    an extra charge (to > from) commits the lease at now.
-- Commands  the earliest lease (ZRANGEBYSCORE LIMIT 0 1); ZREMRANGEBYSCORE
--           only if it has expired; ZCOUNT unless the set is empty; the
--           latest lease (ZRANGEBYSCORE LIMIT live-1 1) when more than one
--           is live (one: the earliest is it, unless expired ones were
--           dropped); when admitted ZADD, and PEXPIRE unless a live lease
--           expires later. Admitted: 3 on an empty set, 4 with one other
--           live lease, 5 with more; denied: 3 (2 with a limit of 1). The
--           latest is read because an earlier lease may outlive the new one
--           (renewed for longer, admitted at a later turn, a longer TTL
--           before a change): the reset is the model's, and the key's TTL
--           never drops below a live lease. ZRANGEBYSCORE and ZCOUNT, not
--           ZRANGE and ZCARD: a decision needs no command the other
--           algorithms do not (a refund, and lease(), also ZREM).

-- The expiry of the lease at `rank` (0 = the earliest) in sorted set
-- `key` from score `lo` ('-inf' when nil), or nil if there is none.
local function lease_expiry(key, rank, lo)
  local e = redis.call('ZRANGEBYSCORE', key, lo or '-inf', '+inf', 'WITHSCORES', 'LIMIT', rank, 1)
  return tonumber(e[2])
end

-- The latest live expiry of bucket b (b.live > 0), read if not known.
local function lease_latest(b)
  if not b.latest then b.latest = lease_expiry(b.key, b.live - 1, b.lo) end
  return b.latest
end

-- Whether `id` is a lease id: 1..64 bytes of [0-9A-Za-z:._-].
local function lease_id_ok(id)
  return type(id) == 'string' and #id >= 1 and #id <= 64 and not string.find(id, '[^0-9A-Za-z:._%-]')
end

-- Phase 3, shaped or not: remaining and reset_ms at now.
local function lease_stats(b, w)
  local live = b.live
  local remaining = w.limit - live
  if remaining < 0 then remaining = 0 end
  if live == 0 then return remaining, 0 end
  return remaining, lease_latest(b) - now
end

-- The table over a bucket b (as the other algorithms'), plus b.id (the
-- lease id), b.live (the live leases), b.first (the earliest expiry,
-- false when unknown), b.latest (the latest live expiry; 0: none; false:
-- unknown), b.lo (nil, or when dry and expired leases stay: the bound
-- above which the live ones are).
local function make_lease() return {
  check = function(b)
    local key, w = b.key, b[1]
    local first = lease_expiry(key, 0)
    local live, lo = 0, nil
    if first then
      if first <= now then
        if dry then
          lo = '(' .. now_str()
        else
          redis.call('ZREMRANGEBYSCORE', key, '-inf', now_str())
        end
        first = false
      end
      live = redis.call('ZCOUNT', key, lo or '-inf', '+inf')
    end
    b.live, b.first, b.latest, b.lo = live, first, false, lo
    if live == 0 then
      b.latest = 0
    elseif live == 1 and first then
      b.latest = first
    end
    if live < w.limit then
      w.retry = 0
      return true
    end
    if not first then
      first = lease_expiry(key, 0, lo)
      b.first = first
      if live == 1 then b.latest = first end
    end
    local retry = first - now
    if retry < 1 then retry = 1 end
    w.retry = retry
    return false
  end,

  commit = function(b)
    local key = b.key
    local expiry = slot + b.max_period
    local latest = 0
    if b.live > 0 then latest = lease_latest(b) end
    local added = redis.call('ZADD', key, num(expiry), b.id)
    b.live = b.live + added
    if expiry >= latest then
      redis.call('PEXPIRE', key, ttl(commit_ttl(b)))
      b.latest = expiry
    elseif added == 0 then
      b.latest = false -- the lease was held: perhaps it was the latest
    end
  end,

  stats = lease_stats,
  shaped_stats = lease_stats,

  -- adjust(): the lease ends; b stays current (true: no check again).
  refund = function(b)
    if redis.call('ZREM', b.key, b.id) == 1 then
      b.live = b.live - 1
      b.latest = false
      if b.live == 0 then b.latest = 0 end
    end
    return true
  end,

  charge_at = function() return now end,

  last = function() return 0 end,

  earliest = function(b, _, t0)
    if b.algorithm.check(b) then return t0 end
    return NEVER
  end,
} end

-- The lease algorithm, made on first use (kept by a library).
local lease_algorithm = nil

-- The lease algorithm and the id of key i's algorithm argument s, which
-- algorithm_for() missed: "lease=<id>". Else nil and the error reply.
local function lease_arg(s, i)
  if type(s) ~= 'string' or string.sub(s, 1, 5) ~= 'lease' then
    return nil, redis.error_reply('ERR tollgate: unknown algorithm for key ' .. i)
  end
  local id = string.sub(s, 7)
  if string.byte(s, 6) ~= 61 or not lease_id_ok(id) then -- '='
    return nil, redis.error_reply('ERR tollgate: bad lease id for key ' .. i)
  end
  if not lease_algorithm then lease_algorithm = make_lease() end
  return lease_algorithm, id
end
