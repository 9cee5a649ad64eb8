-- Leaky bucket as a meter: requests pour cost units in, it drains one unit per interval, a
-- request that would overflow it is denied. Port of algorithm/leaky_bucket.rs.
-- Params: capacity, interval_us
-- Fields: l = whole units, d = when the next unit started draining (µs)
-- Mark: none (a refund takes the cost back out, down to empty)
-- Charge: the level goes above the capacity (debt = level - capacity) and leaks

ALGORITHMS.leaky_bucket = function()
  local leaky_bucket = {fields = {'l', 'd'}}

  -- How long until n more units have drained, counting from leaked_at.
  local function drain(leaked_at, n, interval, now)
    return math.max(leaked_at + n * interval - now, 0)
  end

  -- The answer to a request of cost at now on a bucket as of now (level, leaked_at): port of
  -- LeakyBucket::answer.
  local function answer(rule, level, leaked_at, now, cost)
    local capacity, interval = rule.capacity, rule.interval
    local allowed = level + cost <= capacity
    local filled = level
    if allowed then
      filled = level + cost
    end
    local retry_after = 0
    if not allowed then
      retry_after = drain(leaked_at, level + cost - capacity, interval, now)
    end
    return allowed, math.max(capacity - filled, 0), drain(leaked_at, filled, interval, now), retry_after
  end

  function leaky_bucket.params(rule, capacity, interval)
    rule.capacity, rule.interval = tonumber(capacity), tonumber(interval)
  end

  function leaky_bucket.step(rule, stored, now, cost, commit)
    local interval = rule.interval
    local level, leaked_at = 0, now
    if stored.l and stored.d then
      local leaked = idiv(math.max(now - stored.d, 0), interval)
      if leaked < stored.l then
        level = stored.l - leaked
        leaked_at = stored.d + leaked * interval
      end
    end
    local allowed, remaining, reset_after, retry_after = answer(rule, level, leaked_at, now, cost)
    if allowed and commit then
      save(rule, 'l', level + cost, 'd', leaked_at)
    end
    return allowed, remaining, reset_after, retry_after
  end

  function leaky_bucket.mark(_)
    return 0
  end

  function leaky_bucket.refund(rule, stored, cost, _)
    if stored.l and stored.d then
      save(rule, 'l', math.max(stored.l - cost, 0), 'd', stored.d)
    end
  end

  -- A refund asked for by the caller: port of LeakyBucket::refund, the same as above.
  function leaky_bucket.give_back(rule, stored, _, cost)
    leaky_bucket.refund(rule, stored, cost, 0)
  end

  -- A charge: port of LeakyBucket::charge. The cost is poured in whatever room is left; returns
  -- the answer a step of cost 1 would give on the bucket written (still one as of now), then
  -- the debt.
  function leaky_bucket.charge(rule, stored, now, cost)
    local capacity, interval = rule.capacity, rule.interval
    local level, leaked_at = 0, now
    if stored.l and stored.d then
      local leaked = idiv(math.max(now - stored.d, 0), interval)
      if leaked < stored.l then
        level = stored.l - leaked
        leaked_at = stored.d + leaked * interval
      end
    end
    -- (Comparisons written out rather than math.min and math.max: a call costs Lua more.) Past
    -- the capacity, the level stops at the debt's ceiling, or where it already was above it.
    local filled = level + cost
    if filled > capacity then
      local most = capacity + idiv(MAX_DEBT_US, interval)
      if most < level then
        most = level
      end
      if filled > most then
        filled = most
      end
    end
    level = filled
    save(rule, 'l', level, 'd', leaked_at)
    local allowed, remaining, reset_after, retry_after = answer(rule, level, leaked_at, now, 1)
    return allowed, remaining, reset_after, retry_after, level - capacity
  end

  -- Units in the bucket at now: port of LeakyBucket::spent.
  function leaky_bucket.spent(rule, stored, now)
    if stored.l and stored.d then
      local leaked = idiv(math.max(now - stored.d, 0), rule.interval)
      if leaked < stored.l then
        return stored.l - leaked
      end
    end
    return 0
  end

  return leaky_bucket
end
