-- overrides.lua: the store's overrides (keycap.Override) and the version of
-- their set, by Redis's clock.
--
-- KEYS[1]  the overrides: a hash of pool (32 hex digits) -> expiry .. '|' ..
--          the override (overrides.go); the expiry is in ms, 0 for none
-- KEYS[2]  the version: moved on by every change of the set, to the time
--          in µs or, if that is not later, one more than it was, so that a
--          Redis that lost its data, or the replica that took over from a
--          master before a change reached it, does not hand out again a
--          version that clients hold for other overrides
-- The two share a hash tag, so a script touches one Redis Cluster slot.
--
-- ARGV[1]  the operation, and per operation:
--   set:   ARGV[2] the pool, ARGV[3] the ttl in ms (0: none), ARGV[4] the
--          override. Returns the new version.
--   del:   ARGV[2] the pool. Returns the version, new if it was set.
--   get:   ARGV[2] the version the caller has. Returns {version} when it
--          is still that, else {version, pool, ms left (0: none),
--          override, ...}. An expired override is dropped and left out,
--          without a new version: clients expire it by its time left.
local set, version = KEYS[1], KEYS[2]
local op = ARGV[1]

local function clock()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

local function bump()
  local t = redis.call('TIME')
  local v = math.max(tonumber(redis.call('GET', version) or 0) + 1, t[1] * 1000000 + t[2])
  redis.call('SET', version, string.format('%d', v))
  return v
end

if op == 'set' then
  local now = clock()
  local ttl, exp = tonumber(ARGV[3]), 0
  if ttl > 0 then
    exp = now + ttl
  end
  redis.call('HSET', set, ARGV[2], string.format('%d', exp) .. '|' .. ARGV[4])
  return bump()
end

if op == 'del' then
  if redis.call('HDEL', set, ARGV[2]) == 1 then
    return bump()
  end
  return tonumber(redis.call('GET', version) or 0)
end

if op == 'get' then
  local v = redis.call('GET', version) or '0'
  if v == ARGV[2] then
    return {v}
  end
  local now = clock()
  local out = {v}
  local all = redis.call('HGETALL', set)
  for i = 1, #all, 2 do
    local pool, o = all[i], all[i + 1]
    local exp, rest = string.match(o, '^(%d+)|(.*)$')
    exp = tonumber(exp)
    if exp and exp ~= 0 and exp <= now then
      redis.call('HDEL', set, pool)
    elseif exp then
      local left = 0
      if exp ~= 0 then
        left = exp - now
      end
      out[#out + 1] = pool
      out[#out + 1] = left
      out[#out + 1] = rest
    end
  end
  return out
end

return redis.error_reply('overrides.lua: unknown operation ' .. tostring(op))
