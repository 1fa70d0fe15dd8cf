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
--          ARGV[12] the ticket's ttl (0: no ticket), ARGV[13] its claim
--   give:  ARGV[7] 1 to take the owner's ticket out of the line too,
--          ARGV[8] how long to keep the slot for the key (ms, 0: never),
--          ARGV[9] the key's share, ARGV[10] its minimum
--   renew: ARGV[7] the ttl (ms)
--
-- Slots kept for a key (keycap.WithKeep) are a lease of the zero owner
-- (keycap.KeptFor), which the key's next caller takes over.
local leases, meta, waiting = KEYS[1], KEYS[2], KEYS[3]
local op, lines, channel, kid, owner = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local w = tonumber(ARGV[6])
local kept = string.rep('\0', 16)

local function clock()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

local function keep(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- keepLeases keeps the leases and the meta that counts them alive together:
-- the meta outlives the leases.
local function keepLeases(ms)
  keep(leases, ms)
  keep(meta, ms)
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

-- reconcile drops the counts of leases that Redis expired with their key
-- (every lease lapsed): the meta, kept alive by tickets, would still count
-- them. total is the parent's ZCARD: only 0 can mean that.
local function reconcile(total)
  if total > 0 then
    return
  end
  for _, f in ipairs(redis.call('HKEYS', meta)) do
    if string.sub(f, 1, 1) == 'h' then
      redis.call('HDEL', meta, f)
    end
  end
end

-- expire drops the expired leases of every key.
local function expire(now)
  local gone = redis.call('ZRANGEBYSCORE', leases, '-inf', now)
  if #gone == 0 then
    return
  end
  local per = {}
  for _, m in ipairs(gone) do
    local c = string.sub(m, 1, 32)
    per[c] = (per[c] or 0) + 1
  end
  for c, n in pairs(per) do
    count(c, -n)
  end
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
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

-- before reports whether a key holding ah slots of share as and minimum am
-- is served before one holding bh of bs and bm: below its minimum first,
-- then the fewest slots for its share. It also reports a tie.
local function before(ah, as, am, bh, bs, bm)
  local ab, bb = ah < am, bh < bm
  if ab ~= bb then
    return ab, false
  end
  local aw, bw = as, bs
  if ab then
    aw, bw = am, bm
  end
  local x, y = ah * bw, bh * aw
  return x < y, x == y
end

-- unline takes o's ticket out of c's line.
local function unline(c, o)
  local line = lines .. c
  if redis.call('ZREM', line, o) == 1 then
    redis.call('HDEL', line .. ':t', o)
    if redis.call('EXISTS', line) == 0 then
      redis.call('SREM', waiting, c)
      redis.call('DEL', line .. ':t')
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

-- best returns the waiting key the next free slot goes to: among those
-- whose head ticket fits their own max, the one served first, the oldest
-- head on a tie.
local function best(now)
  local b
  for _, c in ipairs(redis.call('SMEMBERS', waiting)) do
    local o, claim, n, seq = head(c, now)
    if o then
      local max, share, min = config(c)
      local h = held(c)
      if h + n <= max then
        local first, tie = false, false
        if b then
          first, tie = before(h, share, min, b.h, b.share, b.min)
        end
        if not b or first or (tie and seq < b.seq) then
          b = {c = c, o = o, claim = claim, n = n, seq = seq, h = h, share = share, min = min}
        end
      end
    end
  end
  return b
end

-- fill hands the parent's free slots to the waiting keys by the fair
-- share, and publishes the owners served. The best key's head waits until
-- its weight fits: nobody overtakes it.
local function fill(pmax, now)
  if not pmax or redis.call('EXISTS', waiting) == 0 then
    return
  end
  local total = redis.call('ZCARD', leases)
  reconcile(total)
  local served = {}
  while true do
    local b = best(now)
    if not b or total + b.n > pmax then
      break
    end
    unline(b.c, b.o)
    grant(b.c, b.o, b.n, now + b.claim)
    keepLeases(b.claim)
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

if op == 'take' then
  local max, ttl, pmax = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
  local share, min, tttl, claim = tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
  local now = clock()
  expire(now)
  fill(pmax, now)
  local line = lines .. kid
  if redis.call('ZSCORE', leases, kid .. owner) then
    extend(kid, owner, now + ttl)
    keepLeases(ttl)
    unline(kid, owner)
    return {1, 0}
  end
  local lined = redis.call('EXISTS', line) == 1
  if not lined and takeKept(kid, w) then
    grant(kid, owner, w, now + ttl)
    keepLeases(ttl)
    return {1, 0}
  end
  local total = redis.call('ZCARD', leases)
  reconcile(total)
  local h = held(kid)
  if not lined and h + w <= max and total + w <= pmax then
    local first = true
    if redis.call('EXISTS', waiting) == 1 then
      local b = best(now)
      if b then
        first = before(h, share, min, b.h, b.share, b.min)
      end
    end
    if first then
      grant(kid, owner, w, now + ttl)
      keepLeases(ttl)
      return {1, 0}
    end
  end
  if tttl == 0 then
    return {0, 0}
  end
  if not redis.call('ZSCORE', line, owner) then
    redis.call('ZADD', line, redis.call('HINCRBY', meta, 'seq', 1), owner)
  end
  redis.call('HSET', line .. ':t', owner, (now + tttl) .. ':' .. claim .. ':' .. w, 'c', max .. ':' .. share .. ':' .. min)
  redis.call('HSET', meta, 'max', pmax)
  redis.call('SADD', waiting, kid)
  keep(line, tttl + claim)
  keep(line .. ':t', tttl + claim)
  keep(waiting, tttl + claim)
  keep(meta, tttl + claim)
  return {0, redis.call('ZRANK', line, owner)}
end

if op == 'give' then
  local keepMs, share, min = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
  local now
  local lined = redis.call('EXISTS', waiting) == 1
  if lined then
    now = clock()
    expire(now) -- first: a lease that expired frees nothing to keep
  end
  local freed = drop(kid, owner, w)
  if ARGV[7] == '1' then
    unline(kid, owner)
  end
  local isKept = 0
  if lined then
    -- Kept for the key when it would be served first if it asked again.
    if freed > 0 and ARGV[7] ~= '1' and keepMs > 0 and redis.call('EXISTS', lines .. kid) == 0 then
      local b = best(now)
      if b and b.c ~= kid and before(held(kid), share, min, b.h, b.share, b.min) then
        local r = keptSlots(kid)
        for i = 0, r + freed - 1 do
          redis.call('ZADD', leases, now + keepMs, member(kid, kept, i))
        end
        count(kid, freed)
        keepLeases(keepMs)
        isKept = 1
      end
    end
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
    drop(kid, owner, w)
    return 0
  end
  extend(kid, owner, now + ttl)
  keepLeases(ttl)
  return 1
end

return redis.error_reply('share.lua: unknown operation ' .. tostring(op))
