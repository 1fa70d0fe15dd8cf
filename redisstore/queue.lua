-- queue.lua: acquire for a caller willing to wait. (After line.lua.)
--
-- ARGV[1]  owner token
-- ARGV[2]  max
-- ARGV[3]  ttl of the lease, in milliseconds
-- ARGV[4]  ttl of the ticket, in milliseconds
-- ARGV[5]  claim window of the ticket, in milliseconds
-- ARGV[6]  the wake-up channel
-- ARGV[7]  the lease's weight, 1 when absent
-- ARGV[8]  1 to answer a grant with its fencing token (store.Fences)
--
-- Grants as acquire.lua does; when it refuses, the owner holds a ticket in
-- the line (keeping its place if it had one), which expires after the
-- ticket's ttl unless the owner queues again. Returns {1, 0} when granted
-- ({1, 0, token} with ARGV[8]), {0, tickets ahead of the owner's} when
-- refused.
local owner = ARGV[1]
local max, ttl, tttl, claim = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local w = tonumber(ARGV[7]) or 1

local granted, waiting, now = take(owner, w, max, ttl, ARGV[6])
if waiting == nil then
  waiting = redis.call('EXISTS', line) == 1
end
if granted then
  if waiting and redis.call('ZREM', line, owner) == 1 then
    redis.call('HDEL', meta, owner)
  end
  if ARGV[8] == '1' then
    return {1, 0, fence(meta, 'fence', ttl)}
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
