-- release.lua: free owner's lease, and hand the slot to the line. (After
-- line.lua.)
--
-- ARGV[1]  owner token
-- ARGV[2]  1 to take owner's ticket out of the line too (a waiter leaving)
-- ARGV[3]  the wake-up channel
-- ARGV[4]  the lease's weight, 1 when absent
local owner = ARGV[1]
redis.call('ZREM', slots, owner)
for i = 1, (tonumber(ARGV[4]) or 1) - 1 do
  redis.call('ZREM', slots, owner .. '#' .. i)
end
if ARGV[2] == '1' and redis.call('ZREM', line, owner) == 1 then
  redis.call('HDEL', meta, owner)
end
if redis.call('EXISTS', line) == 1 then
  local now = clock()
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  fill(tonumber(redis.call('HGET', meta, 'max')), now, ARGV[3])
end
return 1
