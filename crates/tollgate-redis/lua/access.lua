-- tollgate access lists: the allow and deny list entries added through the admin API, kept in
-- one hash so that every instance of a fleet applies them.
-- KEYS[1]  the entries hash, <prefix>{access-lists}
-- ARGV[1]  'add', 'remove' or 'list'
-- ARGV[2]  add, remove: the encoded entry (one hash field)
-- ARGV[3]  add: the most entries the hash may hold
-- ARGV[4]  add, remove: the TTL in ms, set again on every write (the hash is configuration:
--          it lives while it is written to)
-- Returns:
--   add     {1, now_ms} added, {0, now_ms} already there, {2, count} full (nothing written)
--   remove  {1} removed, {0} not there
--   list    field, value, field, value, ... (values: when the entry was added, ms since epoch)
-- Time from redis.call('TIME').

local op = ARGV[1]
if op == 'list' then
  return redis.call('HGETALL', KEYS[1])
end
if op == 'add' then
  local count = redis.call('HLEN', KEYS[1])
  if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 and count >= tonumber(ARGV[3]) then
    return {2, count}
  end
  local time = redis.call('TIME')
  local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  local added = redis.call('HSETNX', KEYS[1], ARGV[2], now_ms)
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {added, now_ms}
end
if op == 'remove' then
  local removed = redis.call('HDEL', KEYS[1], ARGV[2])
  if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
  end
  return {removed}
end
return redis.error_reply('unknown access list operation')
