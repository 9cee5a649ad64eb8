-- Fixed window: count per window, deny once the count would pass the limit. Denials are not
-- counted. Port of algorithm/fixed_window.rs.
-- ARGV[6] limit, ARGV[7] window_us, ARGV[8] anchor: "epoch" or "first_hit"
-- Fields: s = window start (µs), c = count

local limit, window, first_hit = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8] == 'first_hit'

local FIELDS = {'s', 'c'}

local function step(stored, now, cost, commit)
  local start, count = stored.s, stored.c
  -- Still inside the stored window (or the clock stepped back into it or before it)?
  if not (count and count > 0 and now < start + window) then
    if first_hit then
      start = now
    else
      start = idiv(now, window) * window
    end
    count = 0
  end
  local window_end = start + window
  local allowed = count + cost <= limit
  if allowed then
    count = count + cost
    if commit then
      save({s = start, c = count})
    end
  end
  local reset_after = 0
  if count > 0 then
    reset_after = math.max(window_end - now, 0)
  end
  local retry_after = 0
  if not allowed then
    retry_after = math.max(window_end - now, 0)
  end
  return allowed, math.max(limit - count, 0), reset_after, retry_after
end
