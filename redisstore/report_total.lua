-- report_total.lua: keep a node's report of a period of an adaptive total;
-- return the total and the reports of the period before.
--
-- KEYS[1]  the total: a hash, v (its version) and s (its state)
-- KEYS[2]  the reports of the period: a hash, node -> report
-- KEYS[3]  the reports of the period before
-- ARGV[1]  the node (8 bytes)
-- ARGV[2]  the report
-- ARGV[3]  ttl in milliseconds of the period's reports
--
-- Returns {version or false, state or false, {node, report, ...}}.
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
local t = redis.call('HMGET', KEYS[1], 'v', 's')
return {t[1], t[2], redis.call('HGETALL', KEYS[3])}
