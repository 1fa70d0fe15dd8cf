-- inspect.lua: what a pool, a parent's pools or a pace hold, for an
-- Inspector (inspect.go). It only reads, by Redis's clock, the keys of one
-- hash tag.
--
-- ARGV[1]  the mode, and per mode:
--   pool:   KEYS[1..3] a pool's slots, line and line meta (line.lua).
--           ARGV[2] '1' when the scan found the line alone: a pool that has
--           slots is then left to its slots key (nil).
--           Returns {holders, waiters}.
--   parent: KEYS[1..2] a parent's leases and its set of keys with a line
--           (share.lua). ARGV[2] the line keys' prefix, ARGV[3] the tag of
--           the keys to show in 8 hex digits ('' for every key), ARGV[4]
--           '1' when the scan found the set alone: a parent that has leases
--           is then left to its leases key (nil).
--           Returns {kid, holders, waiters, ...} for each key shown.
--   pace:   KEYS[1] a pace: go-redis/redis_rate's theoretical arrival time,
--           in seconds since 2017. Returns the microseconds it is ahead of
--           now (0 or less: the pace runs no longer).
-- holders is {owner, weight, ms left, ...}, one lease each (a lease of
-- weight w is w members: owner and owner .. '#' .. i), waiters {owner, ms
-- left, ...} in the line's order. Expired leases and tickets are left out.
local mode = ARGV[1]

local function clock()
  local t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000)
end

-- leases groups the live members of the sorted set key by lease: the skip
-- bytes before the owner token name its key (a parent's kid; none in a
-- pool), kept when keep says so. It returns the keys found, each
-- {hs = holders}, and their order.
local function leases(key, now, skip, keep)
  local kids, order = {}, {}
  local r = redis.call('ZRANGEBYSCORE', key, '(' .. now, '+inf', 'WITHSCORES')
  for i = 1, #r, 2 do
    local m = r[i]
    local c = string.sub(m, 1, skip)
    if #m >= skip + 16 and keep(c) then
      local k = kids[c]
      if not k then
        k = {hs = {}, at = {}}
        kids[c] = k
        order[#order + 1] = c
      end
      local o = string.sub(m, skip + 1, skip + 16)
      local left = tonumber(r[i + 1]) - now
      local j = k.at[o]
      if j then
        k.hs[j + 1] = k.hs[j + 1] + 1
        if left > k.hs[j + 2] then
          k.hs[j + 2] = left
        end
      else
        k.at[o] = #k.hs + 1
        k.hs[#k.hs + 1] = o
        k.hs[#k.hs + 1] = 1
        k.hs[#k.hs + 1] = left
      end
    end
  end
  return kids, order
end

-- tickets returns the live tickets of a line, whose meta holds each
-- ticket's "expiry:claim[:weight]".
local function tickets(line, meta, now)
  local ws = {}
  for _, o in ipairs(redis.call('ZRANGE', line, 0, -1)) do
    local m = redis.call('HGET', meta, o)
    local exp = m and tonumber(string.match(m, '^(%d+):'))
    if exp and exp > now then
      ws[#ws + 1] = o
      ws[#ws + 1] = exp - now
    end
  end
  return ws
end

if mode == 'pool' then
  if ARGV[2] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then
    return false
  end
  local now = clock()
  local kids = leases(KEYS[1], now, 0, function() return true end)
  local k = kids['']
  return {k and k.hs or {}, tickets(KEYS[2], KEYS[3], now)}
end

if mode == 'parent' then
  local lines, tag = ARGV[2], ARGV[3]
  if ARGV[4] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then
    return false
  end
  local now = clock()
  local function keep(c)
    return #c == 32 and string.sub(c, 1, #tag) == tag
  end
  local kids, order = leases(KEYS[1], now, 32, keep)
  for _, c in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    if keep(c) then
      local ws = tickets(lines .. c, lines .. c .. ':t', now)
      if #ws > 0 then
        if not kids[c] then
          kids[c] = {hs = {}}
          order[#order + 1] = c
        end
        kids[c].ws = ws
      end
    end
  end
  local out = {}
  for _, c in ipairs(order) do
    out[#out + 1] = c
    out[#out + 1] = kids[c].hs
    out[#out + 1] = kids[c].ws or {}
  end
  return out
end

if mode == 'pace' then
  local tat = redis.call('GET', KEYS[1])
  if not tat then
    return 0
  end
  local t = redis.call('TIME')
  local now = (t[1] - 1483228800) + t[2] / 1000000
  return math.floor((tonumber(tat) - now) * 1000000)
end

return redis.error_reply('inspect.lua: unknown mode ' .. tostring(mode))
