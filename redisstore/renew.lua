-- renew.lua: extend one lease, or report it lost.
--
-- KEYS[1]  the pool: a sorted set of owner token -> expiry (ms, server clock)
-- ARGV[1]  owner token
-- ARGV[2]  ttl in milliseconds
-- ARGV[3]  the lease's weight, 1 when absent: its members are the owner
--          token and owner .. '#' .. i for i from 1 to weight-1
--
-- A lease that is unknown or already expired is lost: it is removed (if
-- present) and 0 is returned, even if the pool has room, because another
-- holder may have been admitted in its place. Otherwise the lease is extended
-- to expire ttl from now and 1 is returned.
local key, owner, ttl, w = KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]) or 1
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local expiry = redis.call('ZSCORE', key, owner)
if not expiry then
  return 0
end
if tonumber(expiry) <= now then
  redis.call('ZREM', key, owner)
  for i = 1, w - 1 do
    redis.call('ZREM', key, owner .. '#' .. i)
  end
  return 0
end
redis.call('ZADD', key, 'XX', now + ttl, owner)
for i = 1, w - 1 do
  redis.call('ZADD', key, 'XX', now + ttl, owner .. '#' .. i)
end
-- At least ttl from now: PEXPIRE's GT (Redis 7) makes that one command.
if not redis.REDIS_VERSION_NUM or redis.call('PEXPIRE', key, ttl, 'GT') == 0 then
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
return 1
