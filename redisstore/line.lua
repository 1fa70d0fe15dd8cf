-- line.lua: the wait line of a pool, shared by the scripts that free or take
-- its slots (prepended to acquire, queue, release and dequeue), and the grant
-- that acquire and queue share.
--
-- KEYS[1]  the pool's slots: a sorted set of owner token -> expiry (ms)
-- KEYS[2]  the pool's line: a sorted set of owner token -> arrival number
-- KEYS[3]  the line's meta: a hash of owner token -> "expiry:claim" (ms) of
--          its ticket, "max" -> the pool's max, "seq" -> the last arrival,
--          "fence" -> the last fencing token granted (store.Fences)
-- The wake-up channel is the last argument. The four names share the pool's
-- hash tag, so a script touches one Redis Cluster slot. Each script or
-- function of the line sets the three from its keys first (linePrologue in
-- functions.go): line.lua is the library of the functions (Redis 7), loaded
-- once, and the head of the scripts (EVALSHA), run at every call.
local slots, line, meta

local function clock()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- lease adds owner o's lease of weight w, expiring at exp: its owner token
-- and w-1 more members, o .. '#' .. i, all of one expiry, so that ZCARD
-- counts slots. With held, o holds a lease already: it is moved to exp,
-- whatever its weight (a weight changed since keeps the lease's). With added,
-- the caller has put the owner token itself at exp.
local function lease(o, w, exp, held, added)
  if not added then
    redis.call('ZADD', slots, exp, o)
  end
  if held then
    local i = 1
    while redis.call('ZSCORE', slots, o .. '#' .. i) do
      redis.call('ZADD', slots, exp, o .. '#' .. i)
      i = i + 1
    end
    return
  end
  for i = 1, w - 1 do
    redis.call('ZADD', slots, exp, o .. '#' .. i)
  end
end

-- keep makes key live at least ms from now. fresh true says key was just
-- created (it has no expiry yet), false that it existed before this call
-- (so it has one: every script that creates a key gives it one), nil that
-- either may be. On Redis 7 and later, PEXPIRE's GT option makes that one
-- command unless fresh is nil and GT declines (a longer expiry, or none);
-- before, it takes PTTL and PEXPIRE. A key that lost its expiry (PERSIST)
-- gets it back at its next renewal (renew.lua).
local gt = redis.REDIS_VERSION_NUM ~= nil
local function keep(key, ms, fresh)
  if fresh then
    redis.call('PEXPIRE', key, ms)
  elseif gt then
    if redis.call('PEXPIRE', key, ms, 'GT') == 0 and fresh == nil and redis.call('PTTL', key) == -1 then
      redis.call('PEXPIRE', key, ms)
    end
  elseif redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- fence returns the fencing token of a grant whose hash h keeps the last
-- one in field f, and keeps h alive ms from now at least: the clock of
-- Redis in µs, or one above the last token when that is not below it. The
-- clock makes the tokens grow even when h is lost (it expired with the
-- pool, or Redis restarted without it), as long as the clock does not go
-- back. Tokens stay below 2^53, exact in a Lua number (until year 2255).
local function fence(h, f, ms)
  local t = redis.call('TIME')
  local token = t[1] * 1000000 + t[2]
  local last = tonumber(redis.call('HGET', h, f))
  if last and last >= token then
    token = last + 1
  end
  redis.call('HSET', h, f, string.format('%d', token))
  keep(h, ms)
  return token
end

-- fill hands the free slots of the pool to the tickets at the head of its
-- line, dropping the expired tickets it meets: each becomes a lease of its
-- owner that expires after the ticket's claim window. A ticket of weight w
-- waits at the head until w slots are free. The owners served are published
-- on the channel, so that their waiters wake.
local function fill(max, now, channel)
  if not max or redis.call('EXISTS', line) == 0 then
    return
  end
  local n = redis.call('ZCARD', slots)
  local served = {}
  while n < max do
    local head = redis.call('ZRANGE', line, 0, 0)
    if #head == 0 then
      break
    end
    local o = head[1]
    local m = redis.call('HGET', meta, o)
    local exp, claim, w
    if m then
      exp, claim, w = string.match(m, '^(%d+):(%d+):?(%d*)$')
      exp, claim, w = tonumber(exp), tonumber(claim), tonumber(w) or 1
    end
    if m and exp > now and not redis.call('ZSCORE', slots, o) then
      if n + w > max then
        break -- the head waits for w free slots
      end
      lease(o, w, now + claim, false)
      keep(slots, claim, n == 0)
      n = n + w
      served[#served + 1] = o
    end
    redis.call('ZREM', line, o)
    redis.call('HDEL', meta, o)
  end
  if #served > 0 then
    local msg = table.concat(served)
    local r = redis.pcall('SPUBLISH', channel, msg)
    if type(r) == 'table' and r.err then
      redis.call('PUBLISH', channel, msg) -- Redis before 7: no sharded pub/sub
    end
  end
end

-- take is acquire.lua's and queue.lua's grant. It grants owner a lease of
-- weight w expiring ttl from now if it holds one already (a slot handed to
-- its ticket included) or the pool has room for w and nobody waits, and
-- keeps the key alive as long; the line's free slots are handed on first.
-- It does only what the decision needs: the expired leases are dropped only
-- when the pool has no room without them, and the line is looked at only
-- when there is room for someone (a line behind a full pool is served by
-- the releases and expiries that make room). ZADD's reply tells a new lease
-- (1) from one the owner holds (0), so a grant needs no ZSCORE. It returns
-- whether it granted, whether anyone waits (nil: not looked at, the pool
-- being full), and now.
local function take(owner, w, max, ttl, channel)
  local now = clock()
  local n = redis.call('ZCARD', slots)
  local reaped = n + w > max
  if reaped then
    n = n - redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  end
  local waiting
  if n < max then
    waiting = redis.call('EXISTS', line) == 1
    if waiting then
      if not reaped then
        redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
      end
      fill(max, now, channel)
      waiting = redis.call('EXISTS', line) == 1
      n = redis.call('ZCARD', slots)
    end
  end
  if not waiting and n + w <= max then
    lease(owner, w, now + ttl, redis.call('ZADD', slots, now + ttl, owner) == 0, true)
  elseif redis.call('ZSCORE', slots, owner) then
    lease(owner, w, now + ttl, true)
  else
    return false, waiting, now
  end
  keep(slots, ttl, n == 0)
  return true, waiting, now
end
