-- acquire.lua: grant a lease on one pool, or refuse. (After line.lua.)
--
-- ARGV[1]  owner token
-- ARGV[2]  max: leases the pool may hold at once (at least 1)
-- ARGV[3]  ttl in milliseconds
-- ARGV[4]  the wake-up channel
-- ARGV[5]  the lease's weight (slots it takes), 1 when absent
--
-- Drops the expired leases and hands the freed slots to the line, then
-- grants the owner a lease expiring ttl from now if it already holds one (a
-- slot handed to its ticket included) or the pool holds fewer than max and
-- nobody waits in its line. The key expires with its last lease, so an idle
-- pool leaves nothing behind. Returns 1 when granted, 0 when refused.
local owner = ARGV[1]
local max, ttl, w = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5]) or 1
local now = clock()

redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
local waiting = redis.call('EXISTS', line) == 1
if waiting then
  fill(max, now, ARGV[4])
  waiting = redis.call('EXISTS', line) == 1
end
-- The common case first, a pool with room: ZADD tells a new lease (1) from
-- one the owner holds already (0), so that needs no ZSCORE.
local n = not waiting and redis.call('ZCARD', slots)
if n and n + w <= max then
  lease(owner, w, now + ttl, redis.call('ZADD', slots, now + ttl, owner) == 0, true)
elseif redis.call('ZSCORE', slots, owner) then
  lease(owner, w, now + ttl, true)
else
  return 0
end
keep(slots, ttl, n == 0)
return 1
