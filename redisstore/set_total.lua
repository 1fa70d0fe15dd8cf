-- set_total.lua: set an adaptive total if its version is still the one
-- the caller decided from.
--
-- KEYS[1]  the total: a hash, v (its version) and s (its state)
-- ARGV[1]  the version it must be at ("0": none)
-- ARGV[2]  the new version
-- ARGV[3]  the new state
-- ARGV[4]  ttl in milliseconds
--
-- Returns {1 if set else 0, version or false, state or false}.
local t = redis.call('HMGET', KEYS[1], 'v', 's')
if (t[1] or '0') ~= ARGV[1] then
  return {0, t[1], t[2]}
end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 's', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, ARGV[2], ARGV[3]}
