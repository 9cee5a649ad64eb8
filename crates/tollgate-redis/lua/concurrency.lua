-- Concurrency limit: acquire or release a lease, or count the live ones (after common.lua). A
-- line-for-line port of `tollgate::concurrency::step` (crates/tollgate/src/concurrency.rs).
-- KEYS[1]  the key's live leases: a sorted set, member = lease id (32 hex digits), score = when
--          the lease expires (µs since the Unix epoch); it expires with its last lease
-- ARGV[1]  now in µs, or "" to use Redis TIME
-- ARGV[2]  "acquire", "release", "clear" or "in_flight"
-- ARGV[3]  the lease id: acquire, the new lease's; release, the one to free; clear, unused;
--          in_flight, absent
-- ARGV[4]  acquire only: max_in_flight
-- ARGV[5]  acquire only: the lease timeout in µs (whole milliseconds)
-- Returns  acquire: {granted (1 or 0), in_flight, at_us, now_us}, where at_us is the new lease's
--          expiry when granted, and the earliest live lease's expiry when denied;
--          release: {released (1 or 0), in_flight, now_us}. A lease that is not held (released,
--          expired, never granted) is released = 0, not an error;
--          clear: {live leases dropped, now_us}; the set is deleted;
--          in_flight: {in_flight, the earliest and the latest live lease's expiry (0 when none),
--          now_us},
--          changing nothing (expired leases are not counted, and not dropped either).

-- A key holding another type makes Redis answer WRONGTYPE: reported as a corrupt value.
local key = KEYS[1]
local now = now_us(ARGV[1])
local id = ARGV[3]

-- in_flight: read only, so before anything writes. A lease whose expiry is now has expired.
if ARGV[2] == 'in_flight' then
  local live = '(' .. num(now)
  local count = redis.call('ZCOUNT', key, live, '+inf')
  local first = redis.call('ZRANGEBYSCORE', key, live, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  return {count, int(first[2], 'expiry') or 0, count > 0 and int(last[2], 'expiry') or 0, now}
end

-- drop_expired: a lease whose expiry is now has expired.
redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now))

if ARGV[2] == 'acquire' then
  local max_in_flight, timeout_us = tonumber(ARGV[4]), tonumber(ARGV[5])
  local count = redis.call('ZCARD', key)
  if count < max_in_flight then
    local expires_at = now + timeout_us
    if redis.call('ZADD', key, 'NX', num(expires_at), id) == 0 then
      corrupt('lease id ' .. id .. ' is already held')
    end
    -- The set lives as long as its last lease.
    local last = int(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2], 'expiry')
    redis.call('PEXPIRE', key, idiv(last - now + 999, 1000))
    return {1, count + 1, expires_at, now}
  end
  local earliest = int(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2], 'expiry')
  return {0, count, earliest, now}
end

if ARGV[2] == 'clear' then
  local live = redis.call('ZCARD', key)
  redis.call('DEL', key)
  return {live, now}
end

-- release: Redis deletes a sorted set left empty, so a key without leases takes no memory.
local released = redis.call('ZREM', key, id)
return {released, redis.call('ZCARD', key), now}
