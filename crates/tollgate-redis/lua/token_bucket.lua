-- Token bucket: capacity tokens, one more per interval; a request takes cost tokens. A missing
-- key has a full bucket. Port of algorithm/token_bucket.rs.
-- ARGV[6] capacity, ARGV[7] interval_us
-- Fields: t = whole tokens, r = when the next token started accruing (µs)

local capacity, interval = tonumber(ARGV[6]), tonumber(ARGV[7])

local FIELDS = {'t', 'r'}

local function step(stored, now, cost, commit)
  local tokens, refilled_at = capacity, now
  if stored.t and stored.r then
    local accrued = idiv(math.max(now - stored.r, 0), interval)
    if stored.t + accrued < capacity then
      tokens = stored.t + accrued
      refilled_at = stored.r + accrued * interval
    end
  end
  local allowed = tokens >= cost
  local left = tokens
  if allowed then
    left = tokens - cost
    if commit then
      save({t = left, r = refilled_at})
    end
  end
  local function accrue(n)
    return math.max(refilled_at + n * interval - now, 0)
  end
  local reset_after = 0
  if left < capacity then
    reset_after = accrue(capacity - left)
  end
  local retry_after = 0
  if not allowed then
    retry_after = accrue(cost - tokens)
  end
  return allowed, left, reset_after, retry_after
end
