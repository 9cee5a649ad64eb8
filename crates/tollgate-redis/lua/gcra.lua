-- GCRA: the theoretical arrival time (TAT) is when the key's whole burst is back. A request
-- pushes it cost x interval ahead and passes if it stays within burst x interval of now.
-- Port of algorithm/gcra.rs.
-- Params: interval_us, burst
-- Fields: t = TAT (µs)
-- Mark: none (a refund pulls the TAT back by the cost)
-- Charge: the TAT moves past now + tolerance (debt = ceil((TAT - now - tolerance) / interval))

ALGORITHMS.gcra = function()
  local gcra = {fields = {'t'}}

  function gcra.params(rule, interval, burst)
    rule.interval, rule.burst = tonumber(interval), tonumber(burst)
    rule.tolerance = rule.burst * rule.interval
  end

  -- The answer to a request of cost at now on a TAT no earlier than now, and the TAT it leaves
  -- when admitted: port of Gcra::answer. (Comparisons are written out rather than math.max: a
  -- call costs Lua more than the step.)
  local function answer(rule, tat, now, cost)
    local interval, tolerance = rule.interval, rule.tolerance
    local pushed = tat + cost * interval
    local allowed = pushed - now <= tolerance
    if allowed then
      tat = pushed
    end
    local ahead = tat - now
    local retry_after = 0
    if not allowed then
      retry_after = pushed - now - tolerance
    end
    local room = tolerance - ahead
    if room < 0 then
      room = 0
    end
    return allowed, idiv(room, interval), ahead, retry_after, tat
  end

  function gcra.step(rule, stored, now, cost, commit)
    local tat = stored.t or now
    if tat < now then
      tat = now
    end
    local allowed, remaining, reset_after, retry_after, pushed = answer(rule, tat, now, cost)
    if allowed and commit then
      save(rule, 't', pushed)
    end
    return allowed, remaining, reset_after, retry_after
  end

  function gcra.mark(_)
    return 0
  end

  function gcra.refund(rule, stored, cost, _)
    if stored.t then
      save(rule, 't', math.max(stored.t - cost * rule.interval, 0))
    end
  end

  -- A refund asked for by the caller: port of Gcra::refund, the same as above.
  function gcra.give_back(rule, stored, _, cost)
    gcra.refund(rule, stored, cost, 0)
  end

  -- A charge: port of Gcra::charge. The TAT moves cost intervals ahead whatever is left;
  -- returns the answer a step of cost 1 would give on the TAT written, then the debt.
  function gcra.charge(rule, stored, now, cost)
    local interval, tolerance = rule.interval, rule.tolerance
    local tat = stored.t or now
    if tat < now then
      tat = now
    end
    -- (Comparisons written out rather than math.min and math.max: a call costs Lua more.)
    local pushed = tat + cost * interval
    local latest = now + tolerance + MAX_DEBT_US
    if pushed > latest then
      -- Past the debt's ceiling: the TAT stops there, or where it already was above it.
      if latest < tat then
        latest = tat
      end
      pushed = latest
    end
    tat = pushed
    save(rule, 't', tat)
    local allowed, remaining, reset_after, retry_after = answer(rule, tat, now, 1)
    local debt = 0
    if not allowed then
      -- A key in debt refuses a request of 1, so only a refused one is worked out.
      local owed_us = tat - now - tolerance
      if owed_us > 0 then
        debt = idiv(owed_us + interval - 1, interval)
      end
    end
    return allowed, remaining, reset_after, retry_after, debt
  end

  -- Requests spent at now: port of Gcra::spent, how far ahead of now the TAT is, in whole
  -- intervals rounded up.
  function gcra.spent(rule, stored, now)
    local tat, interval = stored.t, rule.interval
    if tat and tat > now then
      return idiv(tat - now + interval - 1, interval)
    end
    return 0
  end

  return gcra
end
