-- Attempts counter for brute-force protection. Port of attempts.rs.
-- KEYS[1]  the counter hash: c = count, e = expires at (µs since the Unix epoch)
-- ARGV[1]  now in µs, or "" to use Redis TIME
-- ARGV[2]  "incr" to count a failure, "get" to read
-- ARGV[3]  incr only: the TTL in µs of a new counter (later increments do not extend it)
-- Returns  {count, expires_at_us, now_us}: count 0 when there is no live counter, and the time
--          the script used, so the caller computes the TTL on the same clock

local function num(n)
  return string.format('%.0f', n)
end

local function int(value, name)
  if not value then
    return nil
  end
  local n = tonumber(value)
  if not n or n < 0 or n ~= math.floor(n) or n >= 9007199254740992 then
    error('TOLLGATE_CORRUPT field ' .. name .. ' holds ' .. tostring(value))
  end
  return n
end

-- A key holding another type makes Redis answer WRONGTYPE: reported as a corrupt value.
local key = KEYS[1]

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end

local raw = redis.call('HMGET', key, 'c', 'e')
local count, expires_at = int(raw[1], 'c'), int(raw[2], 'e')
local live = count and expires_at and expires_at > now

if ARGV[2] == 'incr' then
  if live then
    count = count + 1
    redis.call('HSET', key, 'c', num(count))
  else
    local ttl = tonumber(ARGV[3])
    count, expires_at = 1, now + ttl
    redis.call('HSET', key, 'c', '1', 'e', num(expires_at))
    redis.call('PEXPIRE', key, math.floor((ttl + 999) / 1000))
  end
  return {count, expires_at, now}
end
if live then
  return {count, expires_at, now}
end
return {0, 0, now}
