-- tollgate override listing: one policy's key overrides, listed for the admin API, bounded and
-- read page by page (see src/overrides.rs). The override itself is a hash next to the key's
-- state, written by override.lua; these keys only list it.
--
-- KEYS[1]  the policy's hash: key -> the override as set (expiry, algorithm, parameters)
-- KEYS[2]  the policy's sorted set of keys, all of score 0, so read in byte order (BYLEX)
-- KEYS[3]  the policy's sorted set of keys with an expiry, scored by it (µs since the Unix
--          epoch, the setting instance's clock), so lapsed ones are found without a scan
-- ARGV[1]  'add', 'remove' or 'page'
-- ARGV[2]  now in µs: entries whose expiry is now or earlier have lapsed and are dropped first
--          (at most PRUNE of them a call, so no call runs long)
-- add      ARGV[3] the key (in hexadecimal, like every key given here), ARGV[4] the override
--          as set, ARGV[5] its expiry in µs or "", ARGV[6] the most keys the policy may have
--          returns {1, count} set (new or replaced), {0, count} full: nothing written
-- remove   ARGV[3] the key; returns {1} removed, {0} not there
-- page     ARGV[3] the key to list after ("" from the first), ARGV[4] how many
--          returns key, value, key, value, ... (at most ARGV[4] pairs, in byte order)
-- All three keys share the `{:}` hash tag: one slot, one atomic step.

local PRUNE = 1000

-- Keys are any bytes, and arguments travel as text: they come in hexadecimal.
local function unhex(text)
  return (string.gsub(text, '%x%x', function(pair) return string.char(tonumber(pair, 16)) end))
end
local values, order, expiry = KEYS[1], KEYS[2], KEYS[3]

-- Times go to Redis as the strings they came as: a Lua number would be written in a format
-- that rounds them.
local lapsed = redis.call('ZRANGEBYSCORE', expiry, '-inf', ARGV[2], 'LIMIT', 0, PRUNE)
for _, key in ipairs(lapsed) do
  redis.call('HDEL', values, key)
  redis.call('ZREM', order, key)
  redis.call('ZREM', expiry, key)
end

local op = ARGV[1]
if op == 'add' then
  local key = unhex(ARGV[3])
  local count = redis.call('HLEN', values)
  if redis.call('HEXISTS', values, key) == 0 then
    if count >= tonumber(ARGV[6]) then
      return {0, count}
    end
    count = count + 1
  end
  redis.call('HSET', values, key, ARGV[4])
  redis.call('ZADD', order, 0, key)
  if ARGV[5] == '' then
    redis.call('ZREM', expiry, key)
  else
    redis.call('ZADD', expiry, ARGV[5], key)
  end
  return {1, count}
end
if op == 'remove' then
  local key = unhex(ARGV[3])
  redis.call('ZREM', order, key)
  redis.call('ZREM', expiry, key)
  return {redis.call('HDEL', values, key)}
end
if op == 'page' then
  local from = '-'
  if ARGV[3] ~= '' then
    from = '(' .. unhex(ARGV[3])
  end
  local keys = redis.call('ZRANGEBYLEX', order, from, '+', 'LIMIT', 0, tonumber(ARGV[4]))
  if #keys == 0 then
    return {}
  end
  local found = redis.call('HMGET', values, unpack(keys))
  local out = {}
  for i, key in ipairs(keys) do
    if found[i] then
      out[#out + 1] = key
      out[#out + 1] = found[i]
    end
  end
  return out
end
return redis.error_reply('unknown override listing operation')
