-- sync.lua: make one node's members of each pool exactly the given ones.
-- Several pools in one call only on a Redis that is not a cluster (a
-- cluster's script touches one slot).
--
-- KEYS[i]   pool i: a sorted set of owner token -> expiry (ms, server clock)
-- ARGV[1]   the node: the 8-byte prefix of its members' owner tokens
-- ARGV[2]   ttl in milliseconds
-- ARGV[3..] for each pool in turn: how many live members it has, then them
--
-- Drops expired members, and the node's members that are not live (ghosts:
-- releases that never reached Redis); then renews every live member to expire
-- ttl from now, adding back any that Redis lost. Other nodes' members are
-- untouched. Returns, for each pool, how many ghosts were dropped.
local node, ttl = ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local exp = now + ttl
local out = {}
local a = 3
for k = 1, #KEYS do
  local key = KEYS[k]
  local n = tonumber(ARGV[a])
  local first, last = a + 1, a + n
  a = last + 1
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local live = {}
  for i = first, last do
    live[ARGV[i]] = true
  end
  local removed = 0
  for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    if not live[member] and string.sub(member, 1, 8) == node then
      redis.call('ZREM', key, member)
      removed = removed + 1
    end
  end
  if n > 0 then
    local args = {}
    for i = first, last do
      args[#args + 1] = exp
      args[#args + 1] = ARGV[i]
    end
    redis.call('ZADD', key, unpack(args))
    -- At least ttl from now: PEXPIRE's GT (Redis 7) makes that one command.
    if not redis.REDIS_VERSION_NUM or redis.call('PEXPIRE', key, ttl, 'GT') == 0 then
      if redis.call('PTTL', key) < ttl then
        redis.call('PEXPIRE', key, ttl)
      end
    end
  end
  out[k] = removed
end
return out
