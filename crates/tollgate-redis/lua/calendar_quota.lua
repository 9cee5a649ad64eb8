-- Calendar quota: count per calendar day, week, month or year in a time zone, deny once the
-- count would pass the limit. Denials are not counted. Port of algorithm/calendar_quota.rs
-- (CalendarQuota::step_in, refund).
-- Params: limit, boundaries ("b0,b1,b2,b3": µs, the periods [b0, b1), [b1, b2), [b2, b3) that the
--         store computed in Rust around its notion of now, zone rules and DST included)
-- Fields: s = period start (µs), c = count, e = period end (µs: what spent needs, since another
--         version of the policy has no periods to place it with)
-- Mark: the start of the period a spend counted in
-- Charge: the count goes past the limit (debt = count - limit); the period's end clears it
--
-- The script decides by its own now (Redis TIME, or the test's): it picks the period that holds
-- it, so an instance whose clock is a little off at a boundary still counts in the period Redis
-- is in. A now outside all three (a clock off by a whole period) takes the nearest one.

ALGORITHMS.calendar_quota = function()
  local calendar_quota = {fields = {'s', 'c', 'e'}}

  function calendar_quota.params(rule, limit, boundaries)
    rule.limit = tonumber(limit)
    local b = {}
    for value in string.gmatch(boundaries, '%d+') do
      b[#b + 1] = tonumber(value)
    end
    if #b ~= 4 then
      error('TOLLGATE_BAD_CALL calendar_quota expects 4 boundaries, got ' .. tostring(boundaries))
    end
    rule.boundaries = b
  end

  -- The period [start, end) that holds now.
  local function period(rule, now)
    local b = rule.boundaries
    if now < b[2] then
      return b[1], b[2]
    elseif now < b[3] then
      return b[2], b[3]
    end
    return b[3], b[4]
  end

  -- The answer to a request of cost at now with count spent in the period ending at period_end:
  -- port of CalendarQuota::answer.
  local function answer(rule, count, period_end, now, cost)
    local allowed = count + cost <= rule.limit
    if allowed then
      count = count + cost
    end
    -- Every answer tells when the period ends, even with nothing spent in it.
    local reset_after = math.max(period_end - now, 0)
    local retry_after = 0
    if not allowed then
      retry_after = math.max(period_end - now, 0)
    end
    return allowed, math.max(rule.limit - count, 0), reset_after, retry_after
  end

  function calendar_quota.step(rule, stored, now, cost, commit)
    local start, period_end = period(rule, now)
    local count = 0
    if stored.c and stored.c > 0 and stored.s == start then
      count = stored.c
    end
    local allowed, remaining, reset_after, retry_after = answer(rule, count, period_end, now, cost)
    if allowed and commit then
      save(rule, 's', start, 'c', count + cost, 'e', period_end)
    end
    return allowed, remaining, reset_after, retry_after
  end

  function calendar_quota.mark(rule)
    return int(redis.call('HGET', rule.state, 's'), 's') or 0
  end

  -- Undoing a reserve: once the period has moved on, the spend went with it.
  function calendar_quota.refund(rule, stored, cost, mark)
    if stored.c and stored.s == mark then
      save(rule, 's', stored.s, 'c', math.max(stored.c - cost, 0))
    end
  end

  -- A refund asked for by the caller: port of CalendarQuota::refund. The count goes down while
  -- its period is current.
  function calendar_quota.give_back(rule, stored, now, cost)
    local start = period(rule, now)
    if stored.c and stored.c > 0 and stored.s == start then
      save(rule, 's', stored.s, 'c', math.max(stored.c - cost, 0))
    end
  end

  -- A charge: port of CalendarQuota::charge_in. The cost is recorded whatever is left; returns
  -- the answer a step of cost 1 would give in the same period, then the debt.
  function calendar_quota.charge(rule, stored, now, cost)
    local start, period_end = period(rule, now)
    local count = 0
    if stored.c and stored.c > 0 and stored.s == start then
      count = stored.c
    end
    -- (Comparisons written out rather than math.min and math.max: a call costs Lua more.)
    count = count + cost
    if count > MAX_COUNT then
      count = MAX_COUNT
    end
    save(rule, 's', start, 'c', count, 'e', period_end)
    local allowed, remaining, reset_after, retry_after = answer(rule, count, period_end, now, 1)
    return allowed, remaining, reset_after, retry_after, count - rule.limit
  end

  -- Units counted at now: port of CalendarQuota::spent, the count while its period holds now.
  -- A state written before periods were stored without their end counts until it expires,
  -- which is when its period ends.
  function calendar_quota.spent(_, stored, now)
    local count = stored.c
    if count and count > 0 and stored.s <= now and (not stored.e or now < stored.e) then
      return count
    end
    return 0
  end

  return calendar_quota
end
