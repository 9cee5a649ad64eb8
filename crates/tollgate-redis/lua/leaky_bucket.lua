-- Leaky bucket as a meter: requests pour cost units in, it drains one unit per interval, a
-- request that would overflow it is denied. Port of algorithm/leaky_bucket.rs.
-- ARGV[6] capacity, ARGV[7] interval_us
-- Fields: l = whole units, d = when the next unit started draining (µs)

local capacity, interval = tonumber(ARGV[6]), tonumber(ARGV[7])

local FIELDS = {'l', 'd'}

local function step(stored, now, cost, commit)
  local level, leaked_at = 0, now
  if stored.l and stored.d then
    local leaked = idiv(math.max(now - stored.d, 0), interval)
    if leaked < stored.l then
      level = stored.l - leaked
      leaked_at = stored.d + leaked * interval
    end
  end
  local allowed = level + cost <= capacity
  local filled = level
  if allowed then
    filled = level + cost
    if commit then
      save({l = filled, d = leaked_at})
    end
  end
  local function drain(n)
    return math.max(leaked_at + n * interval - now, 0)
  end
  local retry_after = 0
  if not allowed then
    retry_after = drain(level + cost - capacity)
  end
  return allowed, math.max(capacity - filled, 0), drain(filled), retry_after
end
