-- Attempts counter for brute-force protection (after common.lua). Port of attempts.rs.
-- KEYS[1]  the counter hash: c = count, e = expires at (µs since the Unix epoch)
-- ARGV[1]  now in µs, or "" to use Redis TIME
-- ARGV[2]  "incr" to count a failure, "try" to count a try only while fewer than ARGV[4] are
--          counted (Attempts::try_once), "get" to read
-- ARGV[3]  incr and try: the TTL in µs of a new counter (later attempts do not extend it)
-- ARGV[4]  try only: the most attempts counted
-- Returns  {count, expires_at_us, now_us, counted}: count 0 when there is no live counter, the
--          time the script used, so the caller computes the TTL on the same clock, and 1 when
--          this call counted an attempt (0 for get and for a refused try)

-- A key holding another type makes Redis answer WRONGTYPE: reported as a corrupt value.
local key = KEYS[1]

local now = now_us(ARGV[1])

local raw = redis.call('HMGET', key, 'c', 'e')
local count, expires_at = int(raw[1], 'c'), int(raw[2], 'e')
local live = count and expires_at and expires_at > now

-- A try over the maximum is refused and changes nothing; under it, it counts as incr does. The
-- check and the count are one script, so parallel tries cannot all pass the check first.
local op = ARGV[2]
if op == 'try' and live and count >= tonumber(ARGV[4]) then
  return {count, expires_at, now, 0}
end

if op == 'incr' or op == 'try' then
  if live then
    count = count + 1
    redis.call('HSET', key, 'c', num(count))
  else
    local ttl = tonumber(ARGV[3])
    count, expires_at = 1, now + ttl
    redis.call('HSET', key, 'c', '1', 'e', num(expires_at))
    redis.call('PEXPIRE', key, idiv(ttl + 999, 1000))
  end
  return {count, expires_at, now, 1}
end
if live then
  return {count, expires_at, now, 0}
end
return {0, 0, now, 0}
