-- mark.lua: start a mark unless it is running; return its age.
--
-- KEYS[1]  the mark: a string holding its start time (ms, server clock)
-- ARGV[1]  ttl in milliseconds: the mark is forgotten this long after it started
--
-- Returns the mark's age in milliseconds, or -1 when this call started it.
local key, ttl = KEYS[1], tonumber(ARGV[1])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

local start = redis.call('GET', key)
if not start then
  redis.call('SET', key, now, 'PX', ttl)
  return -1
end
return now - tonumber(start)
