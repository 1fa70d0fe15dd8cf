-- share.lua: the pools of a parent's keys (keycap.Parent), their lines and
-- the fair share of the parent's slots, in one script.
--
-- KEYS[1]  the leases of every key: a sorted set of member -> expiry (ms);
--          a lease of weight w is w members, kid .. owner and
--          kid .. owner .. '#' .. i, where kid is the key's pool in 32 hex
--          digits: ZCARD is the parent's slots in use
-- KEYS[2]  the meta: a hash of "h" .. kid -> slots the key holds, "max" ->
--          the parent's max and "seq" -> the last arrival (both written by
--          tickets, for the fills that releases run)
-- KEYS[3]  the keys that have a line: a set of kid
-- KEYS[4]  the keys whose head ticket can be served and that have reached
--          their minimum, in the order they are served (store.Shares): a
--          sorted set scored by the slots the key holds for its share, of
--          members vt .. seq .. kid, vt the slot-time the key received for
--          its share (µs, 16 hex digits) and seq its head ticket's arrival
--          (16 hex digits), so that a tie goes to the least served, then
--          to the oldest head; the kid is the member's last 32 characters
-- KEYS[5]  the same for the keys below their minimum, scored by the slots
--          they hold for their minimum: read before KEYS[4]
-- KEYS[6]  the keys' accounts: a hash of "v" .. kid -> virtual time (ms of
--          slot-time per share), "q" .. kid -> its member in KEYS[4] or
--          KEYS[5], "s" .. kid .. owner -> when a lease began (ms) and "V"
--          -> the parent's virtual time (the key's served last, when it was),
--          "F" -> the last fencing token granted in the parent
-- KEYS[7]  the keys that hold nothing and wait for nothing but keep an
--          account (they are ahead of the parent's time): a sorted set of
--          kid -> since when (ms). An account idle for forget ms is dropped.
-- A key's line is the sorted set ARGV[2] .. kid of owner -> arrival, and its
-- tickets the hash ARGV[2] .. kid .. ':t' of owner -> "expiry:claim:weight"
-- and "c" -> the key's "max:share:min"; the two expire with the line's last
-- ticket. Every name shares the parent's hash tag, so a script touches one
-- Cluster slot.
--
-- ARGV[1]  the operation: take (acquire or queue), give (release or
--          dequeue), renew
-- ARGV[2]  the line keys' prefix
-- ARGV[3]  the wake-up channel
-- ARGV[4]  kid
-- ARGV[5]  owner token
-- ARGV[6]  the lease's weight (a lease already held keeps its own)
-- and, per operation:
--   take:  ARGV[7] the key's max, ARGV[8] the lease's ttl (ms), ARGV[9] the
--          parent's max, ARGV[10] the key's share, ARGV[11] its minimum,
--          ARGV[12] the ticket's ttl (0: no ticket), ARGV[13] its claim,
--          ARGV[14] 1 to answer a grant with its fencing token: {1, 0,
--          token}, from acct's "F", the parent's last token (store.Fences:
--          growing in every key's pool as they grow in the parent's)
--   give:  ARGV[7] 1 to take the owner's ticket out of the line too,
--          ARGV[8] how long to keep the slot for the key (ms, 0: never),
--          ARGV[9] the key's share, ARGV[10] its minimum, ARGV[11] how
--          long the holder used the lease (ms; 0: since its grant)
--   renew: ARGV[7] the ttl (ms)
--
-- Slots kept for a key (keycap.WithKeep) are a lease of the zero owner
-- (keycap.KeptFor), which the key's next caller takes over.
--
-- What follows is defined once in the function library (Redis 7), and run
-- at every call as a script (EVALSHA); each call first sets the keys and
-- the common arguments (sharePrologue in functions.go), then runs the part
-- after the line "-- The call.".
local leases, meta, waiting, fairq, minq, acct, idle
local op, lines, channel, kid, owner, w
local forget = 10000 -- ms: how long an idle key's account is kept
local kept = '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0' -- the zero owner (a function library may not call string.* as it loads)

local function clock()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- keep makes key live at least ms from now: on Redis 7 and later one
-- PEXPIRE … GT where it extends the expiry (as line.lua's keep).
local gt = redis.REDIS_VERSION_NUM ~= nil
local function keep(key, ms)
  if gt then
    if redis.call('PEXPIRE', key, ms, 'GT') == 0 and redis.call('PTTL', key) == -1 then
      redis.call('PEXPIRE', key, ms)
    end
  elseif redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- keepLeases keeps the leases and the meta that counts them alive together:
-- the meta and the accounts outlive the leases.
local function keepLeases(ms)
  keep(leases, ms)
  keep(meta, ms)
  keep(acct, ms)
end

-- granted is take's answer to a grant: {1, 0}, or {1, 0, token} with the
-- grant's fencing token when fenced (ARGV[14]; as line.lua's fence, the
-- parent's clock in µs or one above the last token).
local function granted(ttl, fenced)
  if not fenced then
    return {1, 0}
  end
  local t = redis.call('TIME')
  local token = t[1] * 1000000 + t[2]
  local last = tonumber(redis.call('HGET', acct, 'F'))
  if last and last >= token then
    token = last + 1
  end
  redis.call('HSET', acct, 'F', string.format('%d', token))
  keep(acct, ttl)
  return {1, 0, token}
end

-- num writes x for HSET and ZADD without losing digits.
local function num(x)
  return string.format('%.17g', x)
end

-- vnow returns the parent's virtual time, read once per call.
local V0
local function vnow()
  if not V0 then
    V0 = tonumber(redis.call('HGET', acct, 'V') or 0)
  end
  return V0
end

-- vt returns key c's virtual time: the parent's for a key with no account.
local function vt(c)
  local v = redis.call('HGET', acct, 'v' .. c)
  if v then
    return tonumber(v)
  end
  return vnow()
end


local function held(c)
  return tonumber(redis.call('HGET', meta, 'h' .. c) or 0)
end

local function count(c, n)
  if redis.call('HINCRBY', meta, 'h' .. c, n) <= 0 then
    redis.call('HDEL', meta, 'h' .. c)
  end
end

local function member(c, o, i)
  if i == 0 then
    return c .. o
  end
  return c .. o .. '#' .. i
end

local place -- below

-- reconcile drops the counts of leases that Redis expired with their key
-- (every lease lapsed): the meta, kept alive by tickets, would still count
-- them, and places the waiting keys again by what they hold now. total is
-- the parent's ZCARD: only 0 can mean that.
local function reconcile(total, now)
  if total > 0 then
    return
  end
  local stale = false
  for _, f in ipairs(redis.call('HKEYS', meta)) do
    if string.sub(f, 1, 1) == 'h' then
      redis.call('HDEL', meta, f)
      stale = true
    end
  end
  if stale then
    for _, c in ipairs(redis.call('SMEMBERS', waiting)) do
      place(c, now)
    end
  end
end


-- expire drops the expired leases of every key, and moves the keys that
-- wait in the queue by what they hold now.
local function expire(now)
  local gone = redis.call('ZRANGEBYSCORE', leases, '-inf', now)
  if #gone == 0 then
    return
  end
  local per = {}
  for _, m in ipairs(gone) do
    local c = string.sub(m, 1, 32)
    per[c] = (per[c] or 0) + 1
    if #m == 48 then
      redis.call('HDEL', acct, 's' .. m) -- lapsed: not charged
    end
  end
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
  for c, n in pairs(per) do
    count(c, -n)
    if redis.call('EXISTS', lines .. c) == 1 then
      place(c, now)
    elseif held(c) == 0 and redis.call('HEXISTS', acct, 'v' .. c) == 1 then
      redis.call('ZADD', idle, now, c) -- idle now: its account is forgotten in time
      keep(idle, forget + 1000)
    end
  end
end

-- grant adds o's lease of weight n in key c until exp.
local function grant(c, o, n, exp)
  for i = 0, n - 1 do
    redis.call('ZADD', leases, exp, member(c, o, i))
  end
  count(c, n)
end

-- extend moves o's lease in key c to expire at exp, whatever its weight
-- (a weight that changed since keeps the lease's), and returns its weight.
local function extend(c, o, exp)
  local n = 0
  while redis.call('ZSCORE', leases, member(c, o, n)) do
    redis.call('ZADD', leases, exp, member(c, o, n))
    n = n + 1
  end
  return n
end

-- drop removes o's lease of weight n in key c and returns the slots freed.
-- (A lease taken with more slots, under a weight changed since, keeps the
-- others until they expire: a cap is never passed.)
local function drop(c, o, n)
  local freed = 0
  for i = 0, n - 1 do
    freed = freed + redis.call('ZREM', leases, member(c, o, i))
  end
  if freed > 0 then
    count(c, -freed)
  end
  return freed
end

-- keptSlots returns how many slots are kept for c.
local function keptSlots(c)
  local n = 0
  while redis.call('ZSCORE', leases, member(c, kept, n)) do
    n = n + 1
  end
  return n
end

-- takeKept takes n slots kept for c off their lease, for a caller's, and
-- reports whether there were so many. The caller has dropped the expired
-- leases.
local function takeKept(c, n)
  local r = keptSlots(c)
  if r < n then
    return false
  end
  for i = r - 1, r - n, -1 do
    redis.call('ZREM', leases, member(c, kept, i))
  end
  count(c, -n)
  return true
end

local function config(c)
  local v = redis.call('HGET', lines .. c .. ':t', 'c')
  if not v then
    return 0, 1, 0
  end
  local max, share, min = string.match(v, '^(%d+):(%d+):(%d+)$')
  return tonumber(max), tonumber(share), tonumber(min)
end

-- rank returns the order of a key holding h slots of share and minimum
-- min: below its minimum first, by its slots for its minimum; then by its
-- slots for its share (then by its virtual time, see before).
local function rank(h, share, min)
  if h < min then
    return true, h / min
  end
  return false, h / share
end

-- micros is the virtual time v as it orders the queue's members.
local function micros(v)
  return math.floor(v * 1000)
end

-- before reports whether a key of rank (ab, ax) and virtual time av is
-- served before one of (bb, bx, bv), and whether they tie.
local function before(ab, ax, av, bb, bx, bv)
  if ab ~= bb then
    return ab, false
  end
  if ax ~= bx then
    return ax < bx, false
  end
  av, bv = micros(av), micros(bv)
  return av < bv, av == bv
end

-- unqueue takes key c out of the queue.
local function unqueue(c)
  local m = redis.call('HGET', acct, 'q' .. c)
  if m then
    redis.call('ZREM', fairq, m)
    redis.call('ZREM', minq, m)
    redis.call('HDEL', acct, 'q' .. c)
  end
end

-- unline takes o's ticket out of c's line. The caller places c again
-- when o's was the head.
local function unline(c, o)
  local line = lines .. c
  if redis.call('ZREM', line, o) == 1 then
    redis.call('HDEL', line .. ':t', o)
    if redis.call('EXISTS', line) == 0 then
      redis.call('SREM', waiting, c)
      redis.call('DEL', line .. ':t')
      unqueue(c)
    end
  end
end

-- head returns the live head ticket of c's line (owner, claim, weight,
-- arrival), dropping the expired tickets it meets.
local function head(c, now)
  local line = lines .. c
  while true do
    local h = redis.call('ZRANGE', line, 0, 0, 'WITHSCORES')
    if #h == 0 then
      redis.call('SREM', waiting, c)
      redis.call('DEL', line .. ':t')
      return nil
    end
    local o, seq = h[1], tonumber(h[2])
    local m = redis.call('HGET', line .. ':t', o)
    if m then
      local exp, claim, n = string.match(m, '^(%d+):(%d+):(%d+)$')
      if tonumber(exp) > now and not redis.call('ZSCORE', leases, c .. o) then
        return o, tonumber(claim), tonumber(n), seq
      end
    end
    redis.call('ZREM', line, o)
    redis.call('HDEL', line .. ':t', o)
  end
end

-- place puts key c in the queue, moves it, or takes it out, after
-- anything that changed its head, what it holds or its virtual time: O(log
-- n) in the keys waiting.
place = function(c, now)
  local o, _, n, seq = head(c, now)
  if not o then
    unqueue(c)
    return
  end
  local max, share, min = config(c)
  local h = held(c)
  if h + n > max then -- waits for its own slots
    unqueue(c)
    return
  end
  local m = string.format('%016x%016x', micros(vt(c)), seq) .. c
  local old = redis.call('HGET', acct, 'q' .. c)
  if old and old ~= m then
    redis.call('ZREM', fairq, old)
    redis.call('ZREM', minq, old)
  end
  local below, x = rank(h, share, min)
  local q, other = fairq, minq
  if below then
    q, other = minq, fairq
  end
  -- A new member, or a new field, may have made its key anew: it lives
  -- as long as the line that put it there, at least.
  if redis.call('ZADD', q, num(x), m) == 1 then
    keep(q, redis.call('PTTL', lines .. c))
  end
  redis.call('ZREM', other, m)
  if redis.call('HSET', acct, 'q' .. c, m) == 1 then
    keep(acct, redis.call('PTTL', lines .. c))
  end
end

-- top returns the key at the head of queue q, and its member.
local function top(q)
  local r = redis.call('ZRANGE', q, 0, 0)
  if #r == 0 then
    return nil
  end
  return string.sub(r[1], -32), r[1]
end

-- best returns the waiting key the next free slot goes to, the head of
-- the queue (rank, then the least virtual time, then the oldest head). It
-- drops the expired tickets it meets.
local function best(now)
  while true do
    local q = minq
    local c, m = top(minq)
    if not c then
      q = fairq
      c, m = top(fairq)
    end
    if not c then
      return nil
    end
    local o, claim, n, seq = head(c, now)
    if o then
      local max, share, min = config(c)
      local h = held(c)
      if h + n <= max then
        local below, x = rank(h, share, min)
        return {c = c, o = o, claim = claim, n = n, seq = seq, share = share, below = below, x = x, v = vt(c)}
      end
    end
    place(c, now)
    -- place took c's member out by the key's account ("q" .. c); a member
    -- the account does not name would stay at the head, and this loop
    -- would never end, so it goes by name.
    redis.call('ZREM', q, m)
  end
end

-- grantFair adds o's lease of weight n in key c until exp, starting now;
-- v is c's virtual time. A key served is at the parent's time at least (it
-- keeps no credit from the time it held more than others), and the
-- parent's time moves to the key's.
local function grantFair(c, o, n, exp, now, v)
  grant(c, o, n, exp)
  V0 = math.max(v, vnow())
  redis.call('HSET', acct, 's' .. c .. o, now, 'V', num(V0), 'v' .. c, num(V0))
  redis.call('ZREM', idle, c)
end

-- forgetIdle drops the accounts of up to two keys idle for forget ms: a
-- key that comes back after that starts from the parent's time, and keys
-- that never come back cost nothing.
local function forgetIdle(now)
  local gone = redis.call('ZRANGEBYSCORE', idle, '-inf', now - forget, 'LIMIT', 0, 2)
  for _, c in ipairs(gone) do
    redis.call('HDEL', acct, 'v' .. c)
    redis.call('ZREM', idle, c)
  end
end

-- settle charges key c of share the slot-time of o's lease of n slots,
-- used for d ms (0: held since its grant until now), but never puts c more
-- than that ahead of the parent's time: slots borrowed while nobody else
-- waited are not paid back later. A lease that lapses is not charged: its
-- holder is gone. A key that holds nothing, waits for nothing and is not
-- ahead of the parent's time loses its account: it would start from the
-- parent's.
local function settle(c, o, n, now, share, d)
  local s = redis.call('HGET', acct, 's' .. c .. o)
  if not s then
    return
  end
  redis.call('HDEL', acct, 's' .. c .. o)
  if d <= 0 then
    d = math.max(now - tonumber(s), 0)
  end
  local v = math.min(vt(c), vnow()) + n * d / share
  local isIdle = held(c) == 0 and redis.call('EXISTS', lines .. c) == 0
  if isIdle and v <= vnow() then
    redis.call('HDEL', acct, 'v' .. c)
    return
  end
  redis.call('HSET', acct, 'v' .. c, num(v))
  if isIdle then
    redis.call('ZADD', idle, now, c)
    keep(idle, forget + 1000)
  end
end

-- queued reports whether a key waits in the queue.
local function queued()
  return redis.call('EXISTS', minq) == 1 or redis.call('EXISTS', fairq) == 1
end

-- fill hands the parent's free slots to the waiting keys, best first, and
-- publishes the owners served. The best key's head waits until its weight
-- fits: nobody overtakes it.
local function fill(pmax, now)
  if not pmax or redis.call('EXISTS', waiting) == 0 then
    return
  end
  local total = redis.call('ZCARD', leases)
  reconcile(total, now)
  if total >= pmax or not queued() then
    return -- no slot free, or nobody to serve: the common cases, decided at once
  end
  local served = {}
  while true do
    local b = best(now)
    if not b or total + b.n > pmax then
      break
    end
    local v = vt(b.c)
    unline(b.c, b.o)
    grantFair(b.c, b.o, b.n, now + b.claim, now, v)
    keepLeases(b.claim)
    if redis.call('EXISTS', lines .. b.c) == 1 then
      place(b.c, now)
    end
    total = total + b.n
    served[#served + 1] = b.o
  end
  if #served > 0 then
    local msg = table.concat(served)
    local r = redis.pcall('SPUBLISH', channel, msg)
    if type(r) == 'table' and r.err then
      redis.call('PUBLISH', channel, msg) -- Redis before 7: no sharded pub/sub
    end
  end
end

-- The call.
if op == 'take' then
  local max, ttl, pmax = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
  local share, min, tttl, claim = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
  local fenced = ARGV[14] == '1'
  local now = clock()
  expire(now)
  forgetIdle(now)
  fill(pmax, now)
  local line = lines .. kid
  if redis.call('ZSCORE', leases, kid .. owner) then
    extend(kid, owner, now + ttl)
    keepLeases(ttl)
    unline(kid, owner)
    if redis.call('EXISTS', line) == 1 then
      place(kid, now)
    end
    return granted(ttl, fenced)
  end
  local lined = redis.call('EXISTS', line) == 1
  if not lined and takeKept(kid, w) then
    grant(kid, owner, w, now + ttl)
    redis.call('HSET', acct, 's' .. kid .. owner, now) -- kept, not granted: the parent's time stays
    keepLeases(ttl)
    return granted(ttl, fenced)
  end
  local total = redis.call('ZCARD', leases)
  reconcile(total, now)
  local h = held(kid)
  if not lined and h + w <= max and total + w <= pmax then
    local v = math.max(vt(kid), vnow()) -- no credit banked while it did not wait
    local first = true
    if queued() then
      local b = best(now)
      if b then
        local kb, kx = rank(h, share, min)
        first = before(kb, kx, v, b.below, b.x, b.v)
      end
    end
    if first then
      grantFair(kid, owner, w, now + ttl, now, v)
      keepLeases(ttl)
      return granted(ttl, fenced)
    end
  end
  if tttl == 0 then
    return {0, 0}
  end
  local fresh = not redis.call('ZSCORE', line, owner)
  if fresh then
    if not lined then
      redis.call('HSET', acct, 'v' .. kid, num(math.max(vt(kid), vnow())))
      redis.call('ZREM', idle, kid)
    end
    redis.call('ZADD', line, redis.call('HINCRBY', meta, 'seq', 1), owner)
  end
  redis.call('HSET', line .. ':t', owner, (now + tttl) .. ':' .. claim .. ':' .. w, 'c', max .. ':' .. share .. ':' .. min)
  redis.call('HSET', meta, 'max', pmax)
  redis.call('SADD', waiting, kid)
  keep(line, tttl + claim)
  keep(line .. ':t', tttl + claim)
  keep(waiting, tttl + claim)
  keep(meta, tttl + claim)
  keep(acct, tttl + claim)
  local rank0 = redis.call('ZRANK', line, owner)
  if rank0 == 0 or not lined then
    place(kid, now)
  end
  keep(fairq, tttl + claim)
  keep(minq, tttl + claim)
  return {0, rank0}
end

if op == 'give' then
  local keepMs, share, min, used = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
  local now = clock()
  local lined = redis.call('EXISTS', waiting) == 1
  if lined then
    expire(now) -- first: a lease that expired frees nothing to keep
  end
  local freed = drop(kid, owner, w)
  if freed > 0 then
    settle(kid, owner, freed, now, share, used)
  end
  if ARGV[7] == '1' then
    unline(kid, owner)
  end
  local isKept = 0
  if lined then
    -- Kept for the key when it would be served first if it asked again.
    if freed > 0 and ARGV[7] ~= '1' and keepMs > 0 and redis.call('EXISTS', lines .. kid) == 0 and queued() then
      local b = best(now)
      if b and b.c ~= kid then
        local kb, kx = rank(held(kid), share, min)
        if before(kb, kx, math.max(vt(kid), vnow()), b.below, b.x, b.v) then
          local r = keptSlots(kid)
          for i = 0, r + freed - 1 do
            redis.call('ZADD', leases, now + keepMs, member(kid, kept, i))
          end
          count(kid, freed)
          keepLeases(keepMs)
          isKept = 1
        end
      end
    end
    if redis.call('EXISTS', lines .. kid) == 1 then
      place(kid, now)
    else
      unqueue(kid) -- its line expired meanwhile: its member goes
    end
    forgetIdle(now)
    fill(tonumber(redis.call('HGET', meta, 'max')), now)
  end
  return {freed, isKept}
end

if op == 'renew' then
  local ttl = tonumber(ARGV[7])
  local now = clock()
  local exp = redis.call('ZSCORE', leases, kid .. owner)
  if not exp then
    return 0
  end
  if tonumber(exp) <= now then
    if drop(kid, owner, w) > 0 then
      redis.call('HDEL', acct, 's' .. kid .. owner)
      if redis.call('EXISTS', lines .. kid) == 1 then
        place(kid, now)
      end
    end
    return 0
  end
  extend(kid, owner, now + ttl)
  keepLeases(ttl)
  return 1
end

return redis.error_reply('share.lua: unknown operation ' .. tostring(op))
