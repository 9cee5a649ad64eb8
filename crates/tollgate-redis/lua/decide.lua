-- tollgate decision epilogue: the penalty around the algorithm's step, then the TTL.
-- The algorithm's file defines FIELDS (its hash fields) and step(stored, now, cost, commit),
-- which returns allowed (boolean), remaining, reset_after_us, retry_after_us.

local stored, blocked_until = load(FIELDS)
local allowed, remaining, reset_after, retry_after
if blocked_until > NOW then
  local blocked_for = blocked_until - NOW
  local _, _, reset, retry = step(stored, NOW, COST, false)
  allowed, remaining = false, 0
  reset_after = math.max(reset, blocked_for)
  retry_after = math.max(retry, blocked_for)
else
  allowed, remaining, reset_after, retry_after = step(stored, NOW, COST, COMMIT)
  if not allowed and BLOCK_FOR > 0 then
    if COMMIT then
      redis.call('HSET', STATE, 'b', num(NOW + BLOCK_FOR))
    end
    remaining = 0
    reset_after = math.max(reset_after, BLOCK_FOR)
    retry_after = math.max(retry_after, BLOCK_FOR)
  end
end

if COMMIT then
  -- The state means nothing once the budget is full again, so it lives exactly that long
  -- (rounded up to whole ms); an idle key vanishes on its own.
  local ttl_ms = idiv(reset_after + 999, 1000)
  for _, key in ipairs(KEYS) do
    if ttl_ms > 0 then
      redis.call('PEXPIRE', key, ttl_ms)
    else
      redis.call('DEL', key)
    end
  end
end

local allowed_flag = 0
if allowed then
  allowed_flag = 1
  retry_after = 0
end
return {allowed_flag, remaining, reset_after, retry_after}
