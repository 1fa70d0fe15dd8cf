-- acquire.lua: grant a lease on one pool, or refuse.
--
-- KEYS[1]  the pool: a sorted set of owner token -> expiry (ms, server clock)
-- ARGV[1]  owner token
-- ARGV[2]  max: leases the pool may hold at once (at least 1)
-- ARGV[3]  ttl in milliseconds
--
-- Drops the expired leases, then grants the owner a lease expiring ttl from
-- now if it already holds one or the pool holds fewer than max. The key
-- expires with its last lease, so an idle pool leaves nothing behind.
-- Returns 1 when granted, 0 when refused.
local key, owner = KEYS[1], ARGV[1]
local max, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if not redis.call('ZSCORE', key, owner) and redis.call('ZCARD', key) >= max then
  return 0
end
redis.call('ZADD', key, now + ttl, owner)
if redis.call('PTTL', key) < ttl then
  redis.call('PEXPIRE', key, ttl)
end
return 1
