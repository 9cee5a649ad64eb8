-- tollgate override: writes one key override hash in one atomic step, so that it never exists
-- without its expiry (see src/overrides.rs; the decision script reads it, see prelude.lua).
--
-- KEYS[1]  the override hash, next to the key's state (same hash tag)
-- KEYS[2]  the key's state hash
-- ARGV[1]  the algorithm name (the core's Algorithm::name)
-- ARGV[2..4] its three parameters, in the rule record's format ("" when unused)
-- ARGV[5]  the override as set, for reading it back
-- ARGV[6]  time to live in ms, or "" for an override that stays until removed
-- Returns  1

redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'a', ARGV[1], 'p1', ARGV[2], 'p2', ARGV[3], 'p3', ARGV[4], 'd', ARGV[5])
if ARGV[6] ~= '' then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
end
-- The key's state, if any, must no longer say it has no override (see prelude.lua).
if redis.call('TYPE', KEYS[2]).ok == 'hash' then
  redis.call('HSET', KEYS[2], 'v', '1')
end
return 1
