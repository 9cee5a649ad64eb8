-- GCRA: the theoretical arrival time (TAT) is when the key's whole burst is back. A request
-- pushes it cost x interval ahead and passes if it stays within burst x interval of now.
-- Port of algorithm/gcra.rs.
-- ARGV[6] interval_us, ARGV[7] burst
-- Fields: t = TAT (µs)

local interval, burst = tonumber(ARGV[6]), tonumber(ARGV[7])
local tolerance = burst * interval

local FIELDS = {'t'}

local function step(stored, now, cost, commit)
  local tat = math.max(stored.t or now, now)
  local pushed = tat + cost * interval
  local allowed = pushed - now <= tolerance
  if allowed then
    tat = pushed
    if commit then
      save({t = tat})
    end
  end
  local ahead = tat - now
  local retry_after = 0
  if not allowed then
    retry_after = pushed - now - tolerance
  end
  return allowed, idiv(math.max(tolerance - ahead, 0), interval), ahead, retry_after
end
