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
local held = redis.call('ZSCORE', slots, owner)
if not held and (waiting or redis.call('ZCARD', slots) + w > max) then
  return 0
end
lease(owner, w, now + ttl, held)
keep(slots, ttl)
return 1
