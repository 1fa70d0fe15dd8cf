-- queue.lua: acquire for a caller willing to wait. (After line.lua.)
--
-- ARGV[1]  owner token
-- ARGV[2]  max
-- ARGV[3]  ttl of the lease, in milliseconds
-- ARGV[4]  ttl of the ticket, in milliseconds
-- ARGV[5]  claim window of the ticket, in milliseconds
-- ARGV[6]  the wake-up channel
-- ARGV[7]  the lease's weight, 1 when absent
--
-- Grants as acquire.lua does; when it refuses, the owner holds a ticket in
-- the line (keeping its place if it had one), which expires after the
-- ticket's ttl unless the owner queues again. Returns {1, 0} when granted,
-- {0, tickets ahead of the owner's} when refused.
local owner = ARGV[1]
local max, ttl, tttl, claim = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local w = tonumber(ARGV[7]) or 1
local now = clock()

redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
local waiting = redis.call('EXISTS', line) == 1
if waiting then
  fill(max, now, ARGV[6])
  waiting = redis.call('EXISTS', line) == 1
end
-- As in acquire.lua: a pool with room first, where ZADD tells a held lease.
local n = not waiting and redis.call('ZCARD', slots)
local granted = n and n + w <= max
if granted then
  lease(owner, w, now + ttl, redis.call('ZADD', slots, now + ttl, owner) == 0, true)
elseif redis.call('ZSCORE', slots, owner) then
  lease(owner, w, now + ttl, true)
  granted = true
end
if granted then
  keep(slots, ttl, n == 0)
  if waiting and redis.call('ZREM', line, owner) == 1 then
    redis.call('HDEL', meta, owner)
  end
  return {1, 0}
end
if not redis.call('ZSCORE', line, owner) then
  redis.call('ZADD', line, redis.call('HINCRBY', meta, 'seq', 1), owner)
end
local m = (now + tttl) .. ':' .. claim
if w > 1 then
  m = m .. ':' .. w
end
redis.call('HSET', meta, owner, m, 'max', max)
keep(line, tttl + claim, not waiting)
keep(meta, tttl + claim)
return {0, redis.call('ZRANK', line, owner)}
