-- Token bucket: capacity tokens, one more per interval; a request takes cost tokens. A missing
-- key has a full bucket. Port of algorithm/token_bucket.rs.
-- Params: capacity, interval_us
-- Fields: t = whole tokens, r = when the next token started accruing (µs)
-- Mark: none (a refund puts the cost back, up to a full bucket)
-- Charge: tokens stay at 0 and r moves owed x interval ahead (debt = ceil((r - now) / interval))

ALGORITHMS.token_bucket = function()
  local token_bucket = {fields = {'t', 'r'}}

  -- How long until n more tokens have accrued, counting from refilled_at.
  local function accrue(refilled_at, n, interval, now)
    return math.max(refilled_at + n * interval - now, 0)
  end

  -- The answer to a request of cost at now on a bucket as of now (tokens, refilled_at): port of
  -- TokenBucket::answer. When admitted, remaining is what the bucket holds after it.
  local function answer(rule, tokens, refilled_at, now, cost)
    local capacity, interval = rule.capacity, rule.interval
    -- A refill clock ahead of now is a debt (see charge): nothing passes, not even a question
    -- of cost 0 ("is the key past its limit?").
    local allowed = tokens >= cost and refilled_at <= now
    local left = tokens
    if allowed then
      left = tokens - cost
    end
    local reset_after = 0
    if left < capacity then
      reset_after = accrue(refilled_at, capacity - left, interval, now)
    end
    local retry_after = 0
    if not allowed then
      -- Tokens enough but a clock ahead (it stepped back): wait for the clock.
      retry_after = accrue(refilled_at, math.max(cost - tokens, 0), interval, now)
    end
    return allowed, left, reset_after, retry_after
  end

  function token_bucket.params(rule, capacity, interval)
    rule.capacity, rule.interval = tonumber(capacity), tonumber(interval)
  end

  function token_bucket.step(rule, stored, now, cost, commit)
    local capacity, interval = rule.capacity, rule.interval
    local tokens, refilled_at = capacity, now
    if stored.t and stored.r then
      local accrued = idiv(math.max(now - stored.r, 0), interval)
      if stored.t + accrued < capacity then
        tokens = stored.t + accrued
        refilled_at = stored.r + accrued * interval
      end
    end
    local allowed, left, reset_after, retry_after = answer(rule, tokens, refilled_at, now, cost)
    if allowed and commit then
      save(rule, 't', left, 'r', refilled_at)
    end
    return allowed, left, reset_after, retry_after
  end

  function token_bucket.mark(_)
    return 0
  end

  function token_bucket.refund(rule, stored, cost, _)
    if stored.t and stored.r then
      save(rule, 't', math.min(stored.t + cost, rule.capacity), 'r', stored.r)
    end
  end

  -- A refund asked for by the caller: port of TokenBucket::refund, the same as above.
  function token_bucket.give_back(rule, stored, _, cost)
    token_bucket.refund(rule, stored, cost, 0)
  end

  -- A charge: port of TokenBucket::charge. What the bucket holds is spent, the rest is owed:
  -- the refill clock moves owed intervals ahead. Returns the answer a step of cost 1 would give
  -- on the bucket written (still one as of now), then the debt.
  function token_bucket.charge(rule, stored, now, cost)
    local capacity, interval = rule.capacity, rule.interval
    local tokens, refilled_at = capacity, now
    if stored.t and stored.r then
      local accrued = idiv(math.max(now - stored.r, 0), interval)
      if stored.t + accrued < capacity then
        tokens = stored.t + accrued
        refilled_at = stored.r + accrued * interval
      end
    end
    local debt = 0
    if tokens >= cost then
      tokens = tokens - cost
    else
      local owed = cost - tokens
      local latest = math.max(now + MAX_DEBT_US, refilled_at)
      tokens, refilled_at = 0, math.min(refilled_at + owed * interval, latest)
      debt = idiv(math.max(refilled_at - now, 0) + interval - 1, interval)
    end
    save(rule, 't', tokens, 'r', refilled_at)
    local allowed, remaining, reset_after, retry_after = answer(rule, tokens, refilled_at, now, 1)
    return allowed, remaining, reset_after, retry_after, debt
  end

  -- Tokens spent at now: port of TokenBucket::spent, what the bucket misses of its capacity
  -- plus the tokens owed while its refill clock is ahead of now.
  function token_bucket.spent(rule, stored, now)
    local capacity, interval = rule.capacity, rule.interval
    local tokens, refilled_at = capacity, now
    if stored.t and stored.r then
      local accrued = idiv(math.max(now - stored.r, 0), interval)
      if stored.t + accrued < capacity then
        tokens = stored.t + accrued
        refilled_at = stored.r + accrued * interval
      end
    end
    local owed = 0
    if refilled_at > now then
      owed = idiv(refilled_at - now + interval - 1, interval)
    end
    return capacity - tokens + owed
  end

  return token_bucket
end
