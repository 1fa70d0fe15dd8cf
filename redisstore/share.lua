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
-- the common arguments and starts afresh (begin, from sharePrologue in
-- functions.go), then runs the part after the line "-- The call.".
--
-- A call reads each field it needs once: what it read or wrote is kept
-- for the rest of the call (held, config, vt), and the expiries it asks
-- for are set once per key, as it ends (keep, flush). Both are the call's
-- own: a function library's locals outlive its calls, so begin forgets
-- them.
local leases, meta, waiting, fairq, minq, acct, idle
local op, lines, channel, kid, owner, w
local A          -- the call's ARGV
local V0         -- the parent's virtual time (vnow)
local H, C, VT   -- by key: the slots it holds, its config, its virtual time
local LX         -- by key: whether it has a line
local WX         -- whether any key has one (waiting)
local HM, HQ     -- by key: its member best found at a queue's head, and the queue
local pend, made -- by Redis key: the ms it must live from now at least
                 -- (keep), and whether this call made it
local function begin()
  V0, H, C, VT, LX, WX, HM, HQ, pend, made = nil, {}, {}, {}, {}, nil, {}, {}, {}, {}
end
local forget = 10000 -- ms: how long an idle key's account is kept
local kept = '\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0' -- the zero owner (a function library may not call string.* as it loads)

local function clock()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- keep makes key live at least ms from now, once the call ends (flush);
-- fresh says this call made the key (from nothing), so that it has no
-- expiry yet, or none worth keeping.
local function keep(key, ms, fresh)
  if ms > (pend[key] or 0) then
    pend[key] = ms
  end
  if fresh then
    made[key] = true
  end
end

-- flush sets the expiries keep asked for, once per key: on Redis 7 and
-- later one PEXPIRE … GT where it extends the expiry (as line.lua's keep).
-- The script's clock stands still while it runs, so "from now" is the
-- same at the end as when asked.
local gt = redis.REDIS_VERSION_NUM ~= nil
local function flush()
  for key, ms in pairs(pend) do
    if made[key] then
      redis.call('PEXPIRE', key, ms)
    elseif gt then
      if redis.call('PEXPIRE', key, ms, 'GT') == 0 and redis.call('PTTL', key) == -1 then
        redis.call('PEXPIRE', key, ms)
      end
    elseif redis.call('PTTL', key) < ms then
      redis.call('PEXPIRE', key, ms)
    end
  end
end

-- lifetime returns how long key lives from now on, counting the expiry
-- keep asked for (-1: for ever, -2: gone).
local function lifetime(key)
  local p = pend[key]
  if p and made[key] then
    return p
  end
  local t = redis.call('PTTL', key)
  if p and (t == -1 or p > t) then
    return p -- t == -1: made in this call, its expiry not yet set
  end
  return t
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
local function vnow()
  if not V0 then
    V0 = tonumber(redis.call('HGET', acct, 'V') or 0)
  end
  return V0
end

-- vt returns key c's virtual time: the parent's for a key with no account.
local function vt(c)
  local v = VT[c]
  if v == nil then
    local r
    if V0 then
      r = redis.call('HGET', acct, 'v' .. c)
    else -- and the parent's, which the caller will want
      r = redis.call('HMGET', acct, 'v' .. c, 'V')
      V0 = tonumber(r[2] or 0)
      r = r[1]
    end
    v = r and tonumber(r) or false
    VT[c] = v
  end
  if v then
    return v
  end
  return vnow()
end

-- setVt sets key c's virtual time to v, or drops it (nil): the key then
-- follows the parent's.
local function setVt(c, v)
  if v then
    redis.call('HSET', acct, 'v' .. c, num(v))
  else
    redis.call('HDEL', acct, 'v' .. c)
  end
  VT[c] = v or false
end


-- held returns the slots key c holds (its leases' members, kept ones
-- too).
local function held(c)
  local h = H[c]
  if not h then
    h = tonumber(redis.call('HGET', meta, 'h' .. c) or 0)
    H[c] = h
  end
  return h
end

-- count adds n to the slots key c holds.
local function count(c, n)
  local h = redis.call('HINCRBY', meta, 'h' .. c, n)
  if h <= 0 then
    redis.call('HDEL', meta, 'h' .. c)
    h = 0
  end
  H[c] = h
end

-- hasLine reports whether key c has a line (its tickets' sorted set).
local function hasLine(c)
  local x = LX[c]
  if x == nil then
    x = redis.call('EXISTS', lines .. c) == 1
    LX[c] = x
  end
  return x
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
  H = {}
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
    if hasLine(c) then
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

-- config returns key c's max, share and minimum, as its last ticket
-- wrote them.
local function config(c)
  local v = C[c]
  if v == nil then
    v = redis.call('HGET', lines .. c .. ':t', 'c')
    C[c] = v
  end
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

-- anyLine reports whether any key of the parent has a line.
local function anyLine()
  if WX == nil then
    WX = redis.call('EXISTS', waiting) == 1
  end
  return WX
end

-- unqueue takes key c out of the queue.
local function unqueue(c)
  local m = redis.call('HGET', acct, 'q' .. c)
  if m then
    if m == HM[c] then
      redis.call('ZREM', HQ[c], m) -- where best found it
    else
      redis.call('ZREM', fairq, m)
      redis.call('ZREM', minq, m)
    end
    redis.call('HDEL', acct, 'q' .. c)
  end
  HM[c] = nil
end

-- unline takes o's ticket out of c's line. The caller places c again
-- when o's was the head.
local function unline(c, o)
  local line = lines .. c
  if redis.call('ZREM', line, o) == 1 then
    redis.call('HDEL', line .. ':t', o)
    LX[c] = redis.call('EXISTS', line) == 1
    if not LX[c] then
      redis.call('SREM', waiting, c)
      WX = nil
      redis.call('DEL', line .. ':t')
      C[c] = false
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
      WX = nil
      redis.call('DEL', line .. ':t')
      C[c] = false
      LX[c] = false
      return nil
    end
    LX[c] = true
    local o, seq = h[1], tonumber(h[2])
    local m
    if C[c] == nil then -- the key's config with its head's ticket
      local r = redis.call('HMGET', line .. ':t', o, 'c')
      m, C[c] = r[1], r[2]
    else
      m = redis.call('HGET', line .. ':t', o)
    end
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
-- n) in the keys waiting. known, when set, is the head's {o, n, seq}: a
-- line this call made of one live ticket, which need not be read back.
place = function(c, now, known)
  local o, n, seq
  if known then
    o, n, seq = known[1], known[2], known[3]
  else
    local _
    o, _, n, seq = head(c, now)
  end
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
  local lineTTL
  HM[c] = nil -- it moves
  if redis.call('ZADD', q, num(x), m) == 1 then
    lineTTL = lifetime(lines .. c)
    keep(q, lineTTL)
  end
  redis.call('ZREM', other, m)
  if redis.call('HSET', acct, 'q' .. c, m) == 1 then
    keep(acct, lineTTL or lifetime(lines .. c))
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
        HM[c], HQ[c] = m, q
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
-- parent's time moves to the key's. A key served from its line is not
-- idle (lined): its first ticket took it out.
local function grantFair(c, o, n, exp, now, v, lined)
  grant(c, o, n, exp)
  V0 = math.max(v, vnow())
  redis.call('HSET', acct, 's' .. c .. o, now, 'V', num(V0), 'v' .. c, num(V0))
  VT[c] = V0
  if not lined then
    redis.call('ZREM', idle, c)
  end
end

-- forgetIdle drops the accounts of up to two keys idle for forget ms: a
-- key that comes back after that starts from the parent's time, and keys
-- that never come back cost nothing. Each take runs it: a release makes
-- one key idle at most.
local function forgetIdle(now)
  local gone = redis.call('ZRANGEBYSCORE', idle, '-inf', now - forget, 'LIMIT', 0, 2)
  for _, c in ipairs(gone) do
    setVt(c, nil)
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
  local isIdle = held(c) == 0 and not hasLine(c)
  if isIdle and v <= vnow() then
    setVt(c, nil)
    return
  end
  setVt(c, v)
  if isIdle then
    redis.call('ZADD', idle, now, c)
    keep(idle, forget + 1000)
  end
end

-- fill hands the parent's free slots to the waiting keys, best first, and
-- publishes the owners served. The best key's head waits until its weight
-- fits: nobody overtakes it. It returns the parent's slots in use, where it
-- counted them (reconciled). first, when not nil, is what best returned
-- last in this call, the queue unchanged since (false: nobody waits).
local function fill(pmax, now, first)
  if not pmax or not anyLine() then
    return nil
  end
  local total = redis.call('ZCARD', leases)
  reconcile(total, now)
  if total == 0 then
    first = nil -- reconcile may have placed every waiting key again
  end
  if total >= pmax then
    return total -- no slot free: the common case, decided at once
  end
  local served = {}
  while total < pmax do
    local b
    if first ~= nil then
      b, first = first or nil, nil
    else
      b = best(now)
    end
    if not b or total + b.n > pmax then
      break
    end
    local v = vt(b.c)
    unline(b.c, b.o)
    grantFair(b.c, b.o, b.n, now + b.claim, now, v, true)
    keepLeases(b.claim)
    if hasLine(b.c) then
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
  return total
end

-- take acquires for owner in key kid, or queues its ticket.
local function take()
  local max, ttl, pmax = tonumber(A[7]), tonumber(A[8]), tonumber(A[9])
  local share, min, tttl, claim = tonumber(A[10]), tonumber(A[11]), tonumber(A[12]), tonumber(A[13])
  local fenced = A[14] == '1'
  local now = clock()
  expire(now)
  forgetIdle(now)
  -- A waiter's call places its key first when the key is out of the queue:
  -- a head that its own max held back and that expired since (its caller
  -- gone) changes nothing by itself, and the ticket behind it would wait
  -- for one of the key's leases to end. This call's fill serves it.
  if tttl > 0 and hasLine(kid) and redis.call('HEXISTS', acct, 'q' .. kid) == 0 then
    place(kid, now)
  end
  local counted = fill(pmax, now)
  local line = lines .. kid
  if redis.call('ZSCORE', leases, kid .. owner) then
    extend(kid, owner, now + ttl)
    keepLeases(ttl)
    unline(kid, owner)
    if hasLine(kid) then
      place(kid, now)
    end
    return granted(ttl, fenced)
  end
  local lined = hasLine(kid)
  if not lined and takeKept(kid, w) then
    grant(kid, owner, w, now + ttl)
    redis.call('HSET', acct, 's' .. kid .. owner, now) -- kept, not granted: the parent's time stays
    keepLeases(ttl)
    return granted(ttl, fenced)
  end
  local total = counted
  if not total then
    total = redis.call('ZCARD', leases)
    reconcile(total, now)
  end
  local h = held(kid)
  if not lined and h + w <= max and total + w <= pmax then
    local v = math.max(vt(kid), vnow()) -- no credit banked while it did not wait
    local first = true
    local b = best(now)
    if b then
      local kb, kx = rank(h, share, min)
      first = before(kb, kx, v, b.below, b.x, b.v)
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
  local fresh -- the ticket of a line made now: its head, {owner, weight, arrival}
  if not lined or not redis.call('ZSCORE', line, owner) then -- a fresh ticket
    if not lined then
      setVt(kid, math.max(vt(kid), vnow()))
      redis.call('ZREM', idle, kid)
    end
    local seq = redis.call('HINCRBY', meta, 'seq', 1)
    redis.call('ZADD', line, seq, owner)
    LX[kid] = true
    if not lined then
      fresh = {owner, w, seq}
    end
  end
  C[kid] = max .. ':' .. share .. ':' .. min
  redis.call('HSET', line .. ':t', owner, (now + tttl) .. ':' .. claim .. ':' .. w, 'c', C[kid])
  redis.call('HSET', meta, 'max', pmax)
  redis.call('SADD', waiting, kid)
  WX = true
  -- A line made now has no expiry yet, and its tickets' hash none worth
  -- keeping: the tickets of a line gone are no one's.
  keep(line, tttl + claim, not lined)
  keep(line .. ':t', tttl + claim, not lined)
  keep(waiting, tttl + claim)
  keep(meta, tttl + claim)
  keep(acct, tttl + claim)
  local rank0 = 0
  if lined then
    rank0 = redis.call('ZRANK', line, owner)
  end
  if rank0 == 0 then
    -- (A line made now holds this live ticket only, and its owner holds
    -- no lease of the key: the ZSCORE above.)
    place(kid, now, fresh)
  end
  -- The queue that holds the key's member lives as long as its line: a
  -- key with no minimum is never below it.
  keep(fairq, tttl + claim)
  if min > 0 then
    keep(minq, tttl + claim)
  end
  return {0, rank0}
end

-- give releases owner's lease in key kid, or takes its ticket out.
local function give()
  local keepMs, share, min, used = tonumber(A[8]), tonumber(A[9]), tonumber(A[10]), tonumber(A[11])
  local now = clock()
  local lined = anyLine()
  if lined then
    expire(now) -- first: a lease that expired frees nothing to keep
  end
  local freed = drop(kid, owner, w)
  if freed > 0 then
    settle(kid, owner, freed, now, share, used)
  end
  if A[7] == '1' then
    unline(kid, owner)
  end
  local isKept = 0
  local first -- what best found, for fill: nil when not asked
  if lined then
    -- Kept for the key when it would be served first if it asked again.
    if freed > 0 and A[7] ~= '1' and keepMs > 0 and not hasLine(kid) then
      local b = best(now)
      -- Keeping leaves the queue as it is (the key has no line), so the
      -- fill starts from b.
      first = b or false
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
    if hasLine(kid) then
      place(kid, now)
      first = nil
    end
    -- (A member left by a line that expired goes when it reaches the
    -- head: best passes it.)
    fill(tonumber(redis.call('HGET', meta, 'max')), now, first)
  end
  return {freed, isKept}
end

-- renew extends owner's lease in key kid.
local function renew()
  local ttl = tonumber(A[7])
  local now = clock()
  local exp = redis.call('ZSCORE', leases, kid .. owner)
  if not exp then
    return 0
  end
  if tonumber(exp) <= now then
    if drop(kid, owner, w) > 0 then
      redis.call('HDEL', acct, 's' .. kid .. owner)
      if hasLine(kid) then
        place(kid, now)
      end
    end
    return 0
  end
  extend(kid, owner, now + ttl)
  keepLeases(ttl)
  return 1
end

-- The call.
local r
if op == 'take' then
  r = take()
elseif op == 'give' then
  r = give()
elseif op == 'renew' then
  r = renew()
else
  return redis.error_reply('share.lua: unknown operation ' .. tostring(op))
end
flush()
return r
