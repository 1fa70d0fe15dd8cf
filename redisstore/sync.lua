-- sync.lua: make one node's members of a pool exactly the given ones.
--
-- KEYS[1]   the pool: a sorted set of owner token -> expiry (ms, server clock)
-- ARGV[1]   the node: the 8-byte prefix of its members' owner tokens
-- ARGV[2]   ttl in milliseconds
-- ARGV[3..] the node's live members
--
-- Drops expired members, and the node's members that are not live (ghosts:
-- releases that never reached Redis); then renews every live member to expire
-- ttl from now, adding back any that Redis lost. Other nodes' members are
-- untouched. Returns how many ghosts were dropped.
local key, node, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)

redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
local live = {}
for i = 3, #ARGV do
  live[ARGV[i]] = true
end
local removed = 0
for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
  if string.sub(member, 1, 8) == node and not live[member] then
    redis.call('ZREM', key, member)
    removed = removed + 1
  end
end
if #ARGV >= 3 then
  local args = {}
  for i = 3, #ARGV do
    args[#args + 1] = now + ttl
    args[#args + 1] = ARGV[i]
  end
  redis.call('ZADD', key, unpack(args))
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
return removed
