-- tollgate prefix override: sets one prefix override in the hash of every policy's prefix
-- overrides, unless its policy has the most it may (see src/overrides.rs).
--
-- KEYS[1]  the hash: field "<policy length>:<policy><prefix>" -> the override as set, which
--          starts with its expiry in µs since the Unix epoch ("-" for none) and a space
-- ARGV[1]  the field, in hexadecimal (a prefix is any bytes, and arguments travel as text)
-- ARGV[2]  the override as set
-- ARGV[3]  the policy's part of a field, "<policy length>:<policy>"
-- ARGV[4]  the most prefix overrides a policy may have
-- ARGV[5]  now in µs: overrides whose expiry is now or earlier have lapsed
-- Returns  {1, count} set (new or replaced), {0, count} the policy is full: nothing written
--
-- Replacing an override writes it at once. A new one counts the policy's live overrides,
-- dropping every lapsed one met on the way (of any policy): the hash holds at most the bound
-- times the number of policies, and every instance reads it whole anyway.

local function unhex(text)
  return (string.gsub(text, '%x%x', function(pair) return string.char(tonumber(pair, 16)) end))
end

local hash, field, own = KEYS[1], unhex(ARGV[1]), ARGV[3]
if redis.call('HEXISTS', hash, field) == 1 then
  redis.call('HSET', hash, field, ARGV[2])
  return {1, 0}
end
local now = tonumber(ARGV[5])
local all = redis.call('HGETALL', hash)
local count = 0
for i = 1, #all, 2 do
  local at = tonumber(string.match(all[i + 1], '^(%d+) '))
  if at and at <= now then
    redis.call('HDEL', hash, all[i])
  elseif string.sub(all[i], 1, #own) == own then
    count = count + 1
  end
end
if count >= tonumber(ARGV[4]) then
  return {0, count}
end
redis.call('HSET', hash, field, ARGV[2])
return {1, count + 1}
