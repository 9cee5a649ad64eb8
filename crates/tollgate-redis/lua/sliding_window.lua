-- Sliding window counter: the previous window weighted by its remaining overlap, plus the
-- current one. The overlap moves in whole ms. Port of algorithm/sliding_window.rs.
-- Params: limit, window_us (a whole number of ms; limit x window_ms < 2^51)
-- Fields: s = current window start (µs), p = previous count, c = current count
-- Mark: the start of the window a spend counted in
-- Charge: the current count goes past the limit, weighted as usual
--         (debt = ceil((used - limit x w) / w)); counts stop at 3 x 2^50 / w (and 2^32 - 1)

ALGORITHMS.sliding_window = function()
  local sliding_window = {fields = {'s', 'p', 'c'}}

  function sliding_window.params(rule, limit, window_us)
    rule.limit, rule.window_us = tonumber(limit), tonumber(window_us)
    rule.w = idiv(rule.window_us, 1000)
  end

  -- The budget the counters use at now, in count x ms (the window from s, its previous and
  -- current counts): port of SlidingWindow::used.
  local function used_at(rule, s, previous, current, now)
    local w = rule.w
    -- Whole ms into the current window: the previous window weighs (w - e) / w.
    local into = now - s
    if into < 0 then
      into = 0
    end
    return previous * (w - idiv(into, 1000)) + current * w
  end

  -- The answer to a request of cost at now on the counters as of now, which use `used`: port
  -- of SlidingWindow::answer.
  local function answer(rule, s, previous, current, used, now, cost)
    local limit, window_us, w = rule.limit, rule.window_us, rule.w
    local capacity = limit * w
    local allowed = used + cost * w <= capacity
    if allowed then
      current = current + cost
      used = used + cost * w
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

  function sliding_window.step(rule, stored, now, cost, commit)
    local window_us = rule.window_us
    local start = idiv(now, window_us) * window_us
    local s, previous, current = start, 0, 0
    if stored.s and stored.s >= start then
      -- The clock stepped back before the stored window: keep counting in it.
      s, previous, current = stored.s, stored.p or 0, stored.c or 0
    elseif stored.s and stored.s + window_us == start then
      previous = stored.c or 0
    end
    local used = used_at(rule, s, previous, current, now)
    local allowed, remaining, reset_after, retry_after = answer(rule, s, previous, current, used, now, cost)
    if allowed and commit then
      save(rule, 's', s, 'p', previous, 'c', current + cost)
    end
    return allowed, remaining, reset_after, retry_after
  end

  function sliding_window.mark(rule)
    return int(redis.call('HGET', rule.state, 's'), 's') or 0
  end

  -- The spend is in the current count while its window is current, then in the previous one;
  -- after that it weighs nothing any more.
  function sliding_window.refund(rule, stored, cost, mark)
    if not stored.s then
      return
    end
    local previous, current = stored.p or 0, stored.c or 0
    if stored.s == mark then
      current = math.max(current - cost, 0)
    elseif stored.s == mark + rule.window_us then
      previous = math.max(previous - cost, 0)
    else
      return
    end
    save(rule, 's', stored.s, 'p', previous, 'c', current)
  end

  -- A refund asked for by the caller: port of SlidingWindow::refund. Newest spends first: the
  -- stored window's count while it weighs, then the count before it while that weighs.
  function sliding_window.give_back(rule, stored, now, cost)
    if not stored.s then
      return
    end
    local start = idiv(now, rule.window_us) * rule.window_us
    if stored.s + rule.window_us < start then
      return
    end
    local previous, current = stored.p or 0, stored.c or 0
    local from_current = math.min(cost, current)
    current = current - from_current
    if stored.s >= start then
      previous = previous - math.min(cost - from_current, previous)
    end
    save(rule, 's', stored.s, 'p', previous, 'c', current)
  end

  -- A charge: port of SlidingWindow::charge. The cost is counted whatever is left; returns the
  -- answer a step of cost 1 would give on the counters written (still the ones as of now), then
  -- the debt.
  function sliding_window.charge(rule, stored, now, cost)
    local window_us, w = rule.window_us, rule.w
    local start = idiv(now, window_us) * window_us
    local s, previous, current = start, 0, 0
    if stored.s and stored.s >= start then
      s, previous, current = stored.s, stored.p or 0, stored.c or 0
    elseif stored.s and stored.s + window_us == start then
      previous = stored.c or 0
    end
    -- (Comparisons written out rather than math.min and math.max: a call costs Lua more.)
    -- Past the bound (3 x MAX_COUNT weighed, and a u32), the count stops at it, or where it
    -- already was above it; the bound is worked out only then.
    local counted = current + cost
    if counted * w > 3 * MAX_COUNT or counted > 4294967295 then
      local most = idiv(3 * MAX_COUNT, w)
      if most > 4294967295 then
        most = 4294967295
      end
      if most < current then
        most = current
      end
      counted = most
    end
    current = counted
    save(rule, 's', s, 'p', previous, 'c', current)
    local used = used_at(rule, s, previous, current, now)
    local allowed, remaining, reset_after, retry_after = answer(rule, s, previous, current, used, now, 1)
    local debt = 0
    if not allowed then
      -- A key in debt refuses a request of 1, so only a refused one is worked out.
      local owed = used - rule.limit * w
      if owed > 0 then
        debt = idiv(owed + w - 1, w)
      end
    end
    return allowed, remaining, reset_after, retry_after, debt
  end

  -- Units the window weighs at now, rounded up: port of SlidingWindow::spent.
  function sliding_window.spent(rule, stored, now)
    local window_us, w = rule.window_us, rule.w
    local start = idiv(now, window_us) * window_us
    local s, previous, current = start, 0, 0
    if stored.s and stored.s >= start then
      s, previous, current = stored.s, stored.p or 0, stored.c or 0
    elseif stored.s and stored.s + window_us == start then
      previous = stored.c or 0
    end
    return idiv(used_at(rule, s, previous, current, now) + w - 1, w)
  end

  return sliding_window
end
