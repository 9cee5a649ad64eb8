-- Fixed window: count per window, deny once the count would pass the limit. Denials are not
-- counted. Port of algorithm/fixed_window.rs.
-- Params: limit, window_us, anchor ("epoch" or "first_hit")
-- Fields: s = window start (µs), c = count
-- Mark: the start of the window a spend counted in
-- Charge: the count goes past the limit (debt = count - limit); the window's end clears it

ALGORITHMS.fixed_window = function()
  local fixed_window = {fields = {'s', 'c'}}

  function fixed_window.params(rule, limit, window, anchor)
    rule.limit, rule.window, rule.first_hit = tonumber(limit), tonumber(window), anchor == 'first_hit'
  end

  -- The answer to a request of cost at now in the window from start holding count: port of
  -- FixedWindow::answer. (Comparisons are written out rather than math.max: a call costs Lua
  -- more than the step.)
  local function answer(rule, start, count, now, cost)
    local limit = rule.limit
    local allowed = count + cost <= limit
    if allowed then
      count = count + cost
    end
    local left = start + rule.window - now
    if left < 0 then
      left = 0
    end
    local reset_after, retry_after = 0, 0
    if count > 0 then
      reset_after = left
    end
    if not allowed then
      retry_after = left
    end
    local remaining = limit - count
    if remaining < 0 then
      remaining = 0
    end
    return allowed, remaining, reset_after, retry_after
  end

  function fixed_window.step(rule, stored, now, cost, commit)
    local window, first_hit = rule.window, rule.first_hit
    local start, count = stored.s, stored.c
    -- Still inside the stored window (or the clock stepped back into it or before it)? Then the
    -- state already lives at least until the window ends (see expire in request.lua).
    local continued = count and count > 0 and now < start + window
    if not continued then
      if first_hit then
        start = now
      else
        start = now - now % window
      end
      count = 0
    end
    local allowed, remaining, reset_after, retry_after = answer(rule, start, count, now, cost)
    if allowed and commit then
      if continued then
        redis.call('HSET', rule.state, 'c', num(count + cost))
      elseif rule.stamped then
        redis.call('HSET', rule.state, 'a', rule.stamp, 'v', rule.overridden and '1' or '0', 's', num(start), 'c',
          num(count + cost))
      else
        -- A new state: it also records the version that wrote it (see save).
        redis.call('HSET', rule.state, 'a', rule.stamp, 'g', rule.version, 'v', rule.overridden and '1' or '0', 's',
          num(start), 'c', num(count + cost))
      end
    end
    return allowed, remaining, reset_after, retry_after, continued
  end

  function fixed_window.mark(rule)
    return int(redis.call('HGET', rule.state, 's'), 's') or 0
  end

  -- Once the window has moved on, the spend went with it: nothing is left to undo.
  function fixed_window.refund(rule, stored, cost, mark)
    if stored.c and stored.s == mark then
      save(rule, 's', stored.s, 'c', math.max(stored.c - cost, 0))
    end
  end

  -- A refund asked for by the caller: port of FixedWindow::refund. The count goes down while its
  -- window is current; once it has passed, the spend went with it.
  function fixed_window.give_back(rule, stored, now, cost)
    if stored.c and stored.c > 0 and now < stored.s + rule.window then
      save(rule, 's', stored.s, 'c', math.max(stored.c - cost, 0))
    end
  end

  -- A charge: port of FixedWindow::charge. The cost is recorded whatever is left; returns the
  -- answer a step of cost 1 would give in the window written (still the one now falls in), the
  -- debt, and whether it continued a window the state counts in (so its expiry already covers
  -- it).
  function fixed_window.charge(rule, stored, now, cost)
    local limit, window = rule.limit, rule.window
    local start, count = stored.s, stored.c
    local continued = count and count > 0 and now < start + window
    if not continued then
      if rule.first_hit then
        start = now
      else
        start = now - now % window
      end
      count = 0
    end
    -- (Comparisons written out rather than math.min and math.max: a call costs Lua more.)
    count = count + cost
    if count > MAX_COUNT then
      count = MAX_COUNT
    end
    if continued then
      redis.call('HSET', rule.state, 'c', num(count))
    else
      save(rule, 's', start, 'c', count)
    end
    local allowed, remaining, reset_after, retry_after = answer(rule, start, count, now, 1)
    return allowed, remaining, reset_after, retry_after, count - limit, continued
  end

  -- Units spent at now: port of FixedWindow::spent, the count while its window is current.
  function fixed_window.spent(rule, stored, now)
    local count = stored.c
    if count and count > 0 and now < stored.s + rule.window then
      return count
    end
    return 0
  end

  return fixed_window
end
