-- acquire.lua: grant a lease on one pool, or refuse. (After line.lua.)
--
-- ARGV[1]  owner token
-- ARGV[2]  max: leases the pool may hold at once (at least 1)
-- ARGV[3]  ttl in milliseconds
-- ARGV[4]  the wake-up channel
-- ARGV[5]  the lease's weight (slots it takes), 1 when absent
-- ARGV[6]  1 to answer a grant with its fencing token (store.Fences)
--
-- Drops the expired leases and hands the freed slots to the line, then
-- grants the owner a lease expiring ttl from now if it already holds one (a
-- slot handed to its ticket included) or the pool holds fewer than max and
-- nobody waits in its line. The key expires with its last lease, so an idle
-- pool leaves nothing behind. Returns 1 when granted, 0 when refused; with
-- ARGV[6], the grant's fencing token (above 1) in place of 1.
local granted = take(ARGV[1], tonumber(ARGV[5]) or 1, tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4])
if not granted then
  return 0
end
if ARGV[6] == '1' then
  return fence(meta, 'fence', tonumber(ARGV[3]))
end
return 1
