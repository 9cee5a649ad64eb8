-- Attempts counter for brute-force protection (after common.lua). Port of attempts.rs.
-- KEYS[1]  the counter hash: c = count, e = expires at (µs since the Unix epoch)
-- ARGV[1]  now in µs, or "" to use Redis TIME
-- ARGV[2]  "incr" to count a failure, "get" to read
-- ARGV[3]  incr only: the TTL in µs of a new counter (later increments do not extend it)
-- Returns  {count, expires_at_us, now_us}: count 0 when there is no live counter, and the time
--          the script used, so the caller computes the TTL on the same clock

-- A key holding another type makes Redis answer WRONGTYPE: reported as a corrupt value.
local key = KEYS[1]

local now = now_us(ARGV[1])

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
    redis.call('PEXPIRE', key, idiv(ttl + 999, 1000))
  end
  return {count, expires_at, now}
end
if live then
  return {count, expires_at, now}
end
return {0, 0, now}
