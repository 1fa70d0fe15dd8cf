-- pause.lua: pause for at least ttl from now; never shorten a longer pause.
--
-- KEYS[1]  the pause: a key whose TTL is what remains of the pause
-- ARGV[1]  ttl in milliseconds (0 or less: only report)
--
-- Returns how many milliseconds the pause now lasts (0: not paused).
local key, ttl = KEYS[1], tonumber(ARGV[1])
local left = redis.call('PTTL', key)
if ttl > 0 and left < ttl then
  redis.call('SET', key, '1', 'PX', ttl)
  return ttl
end
if left < 0 then
  return 0
end
return left
