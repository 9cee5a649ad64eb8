-- tollgate access lists: the allow and deny list entries added through the admin API, kept in
-- one hash so that every instance of a fleet applies them.
-- KEYS[1]  the entries hash, <prefix>{access-lists}
-- ARGV[1]  'add' or 'remove'
-- ARGV[2]  add, remove: the encoded entry (one hash field)
-- ARGV[3]  add: the most entries the hash may hold
-- ARGV[4]  add, remove: the TTL in ms, set again on every write (the hash is configuration:
--          it lives while it is written to)
-- ARGV[5]  add: the most bytes the entries' fields may take together
-- Returns:
--   add     {1, now_ms} added, {0, now_ms} already there, {2, count} full (nothing written),
--           {3, bytes} the entries would take more than ARGV[5] bytes (nothing written)
--   remove  {1} removed, {0} not there
-- Time from redis.call('TIME'). Readers page through the hash with HSCAN (no script: a whole
-- read in one step would hold Redis for as long as it takes), after comparing `version`.
--
-- Two fields are not entries: `bytes`, the sum of the entries' field lengths, for the byte
-- bound, and `version`, counted up by every change, so that a reader whose copy is as recent
-- skips the read. No entry's field can be either (an encoded entry starts with its list and a
-- colon), and readers skip fields that do not decode. A hash written before it had them gets
-- them on its next write.

local op = ARGV[1]
local SIZE, VERSION = 'bytes', 'version'

-- The entries' bytes, counted once for a hash that has no `bytes` field yet.
local function size()
  local held = redis.call('HGET', KEYS[1], SIZE)
  if held then
    return tonumber(held)
  end
  local total = 0
  for _, field in ipairs(redis.call('HKEYS', KEYS[1])) do
    total = total + #field
  end
  if total > 0 then
    redis.call('HSET', KEYS[1], SIZE, total)
  end
  return total
end

if op == 'add' then
  local held = size()
  local count = redis.call('HLEN', KEYS[1]) - redis.call('HEXISTS', KEYS[1], SIZE)
    - redis.call('HEXISTS', KEYS[1], VERSION)
  local time = redis.call('TIME')
  local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
    return {0, now_ms}
  end
  if count >= tonumber(ARGV[3]) then
    return {2, count}
  end
  if held + #ARGV[2] > tonumber(ARGV[5]) then
    return {3, held}
  end
  redis.call('HSET', KEYS[1], ARGV[2], now_ms)
  redis.call('HSET', KEYS[1], SIZE, held + #ARGV[2])
  redis.call('HINCRBY', KEYS[1], VERSION, 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {1, now_ms}
end
if op == 'remove' then
  local held = size()
  local removed = redis.call('HDEL', KEYS[1], ARGV[2])
  if removed == 1 then
    redis.call('HSET', KEYS[1], SIZE, held - #ARGV[2])
    redis.call('HINCRBY', KEYS[1], VERSION, 1)
  end
  if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
  end
  return {removed}
end
return redis.error_reply('unknown access list operation')
