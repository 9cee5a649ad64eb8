-- Sliding window counter: the previous window weighted by its remaining overlap, plus the
-- current one. The overlap moves in whole ms. Port of algorithm/sliding_window.rs.
-- ARGV[6] limit, ARGV[7] window_us (a whole number of ms; limit x window_ms < 2^51)
-- Fields: s = current window start (µs), p = previous count, c = current count

local limit, window_us = tonumber(ARGV[6]), tonumber(ARGV[7])
local w = idiv(window_us, 1000)

local FIELDS = {'s', 'p', 'c'}

local function step(stored, now, cost, commit)
  local start = idiv(now, window_us) * window_us
  local s, previous, current = start, 0, 0
  if stored.s and stored.s >= start then
    -- The clock stepped back before the stored window: keep counting in it.
    s, previous, current = stored.s, stored.p or 0, stored.c or 0
  elseif stored.s and stored.s + window_us == start then
    previous = stored.c or 0
  end
  local e = idiv(math.max(now - s, 0), 1000)
  local capacity = limit * w
  local used = previous * (w - e) + current * w
  local allowed = used + cost * w <= capacity
  if allowed then
    current = current + cost
    used = used + cost * w
    if commit then
      save({s = s, p = previous, c = current})
    end
  end
  local window_end = s + window_us
  local reset_after = 0
  if current > 0 then
    reset_after = window_end + window_us - now
  elseif previous > 0 then
    reset_after = window_end - now
  end
  local retry_after = 0
  if not allowed then
    local from, room, weight
    if current + cost <= limit then
      from, room, weight = s, limit - current - cost, previous
    else
      from, room, weight = s + window_us, math.max(limit - cost, 0), current
    end
    local longest_overlap = math.min(idiv(room * w, math.max(weight, 1)), w)
    retry_after = from + (w - longest_overlap) * 1000 - now
  end
  return allowed, idiv(math.max(capacity - used, 0), w), reset_after, retry_after
end
