-- sync.lua: make one node's members of each pool exactly the given ones.
-- Several pools in one call only on a Redis that is not a cluster (a
-- cluster's script touches one slot).
--
-- KEYS[i]   pool i: a sorted set of owner token -> expiry (ms, server clock)
-- ARGV[1]   the node: the 8-byte prefix of its members' owner tokens
-- ARGV[2]   ttl in milliseconds
-- ARGV[3..] for each pool in turn: how many live members it has, then them
--
-- Renews every live member to expire ttl from now, adding back any that
-- Redis lost; then drops the node's other members (ghosts: releases that
-- never reached Redis) and expired members. Other nodes' live members are
-- untouched. Returns, for each pool, how many ghosts were dropped.
--
-- Numbers go to redis.call as strings made once: Redis formats each Lua
-- number it is given, which cost more than the ZADD itself here.
local node, ttl = ARGV[1], ARGV[2]
local t = redis.call('TIME')
local ms = t[1] * 1000 + math.floor(t[2] / 1000)
local exp = tostring(ms + tonumber(ttl))
local renewed = '(' .. exp -- below the score every live member now has

-- unpack takes at most a few thousand values: commands of a long list go
-- in parts.
local part = 1000
local function each(cmd, key, list, n)
  for i = 1, n, part do
    redis.call(cmd, key, unpack(list, i, math.min(i + part - 1, n)))
  end
end

local out, args = {}, {}
local a = 3
for k = 1, #KEYS do
  local key = KEYS[k]
  local n = tonumber(ARGV[a])
  local first, last = a + 1, a + n
  a = last + 1
  if n > 0 then
    local j = 0
    for i = first, last do
      args[j + 1], args[j + 2] = exp, ARGV[i]
      j = j + 2
    end
    each('ZADD', key, args, j)
    -- At least ttl from now: PEXPIRE's GT (Redis 7) makes that one command.
    if not redis.REDIS_VERSION_NUM or redis.call('PEXPIRE', key, ttl, 'GT') == 0 then
      if redis.call('PTTL', key) < tonumber(ttl) then
        redis.call('PEXPIRE', key, ttl)
      end
    end
  end
  -- The pool holds the n live members: if it holds nothing else, it has no
  -- ghost and no expired member (the common case: every member of the pool
  -- is on this node). Otherwise the members scored below the renewed ones
  -- are other nodes' (kept unless expired) and this node's ghosts; and if
  -- more than the n live members score as high as they do (a ghost taken in
  -- the same millisecond, a clock set back), those are looked at one by one.
  local removed = 0
  local total = redis.call('ZCARD', key)
  if total > n then
    local drop = {}
    local r = redis.call('ZRANGEBYSCORE', key, '-inf', renewed, 'WITHSCORES')
    for i = 1, #r, 2 do
      if string.sub(r[i], 1, 8) == node then
        drop[#drop + 1] = r[i]
        removed = removed + 1
      elseif tonumber(r[i + 1]) <= ms then
        drop[#drop + 1] = r[i]
      end
    end
    if total - #r / 2 > n then
      local live = {}
      for i = first, last do
        live[ARGV[i]] = true
      end
      for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, exp, '+inf')) do
        if not live[m] and string.sub(m, 1, 8) == node then
          drop[#drop + 1] = m
          removed = removed + 1
        end
      end
    end
    each('ZREM', key, drop, #drop)
  end
  out[k] = removed
end
return out
