-- Sliding log: a sorted set of admitted requests (score = time in µs, member = "time:cost",
-- one member per distinct time); a request passes if the last window leaves room for it.
-- Denials are not recorded. Port of algorithm/sliding_log.rs.
-- Params: limit, window_us
-- Fields: n = total cost of the members in the set; and a second key, the sorted set. A state
--         a call that only looks worked out (see charged) holds its entries as well, in
--         entries: the steps read them there, as the set is not written
-- Mark: the time (score) of the entry a spend went into
-- Charge: the cost is recorded as one entry whatever is left (debt = used - limit); past
--         limit + 1 entries it joins the newest, which takes the charge's time

ALGORITHMS.sliding_log = function()
  -- The cost stored in a member "time:cost".
  local function member_cost(member)
    local cost = int(string.match(member, ':(%d+)$'), 'sliding log member ' .. member)
    if not cost then
      corrupt('sliding log member ' .. member)
    end
    return cost
  end

  local sliding_log = {fields = {'n'}, log = true}

  function sliding_log.params(rule, limit, window)
    rule.limit, rule.window = tonumber(limit), tonumber(window)
  end

  -- The answer to a request of cost at now on a log whose entries in the window add up to used,
  -- its newest entry at newest (nil when it has none): port of SlidingLog::answer. entries:
  -- the log's entries in the window when it is not the set (see charged), as the set's reply.
  local function answer(rule, used, newest, now, cost, entries)
    local limit, window = rule.limit, rule.window
    local allowed = used + cost <= limit
    local retry_after = 0
    if not allowed then
      -- Entries must expire, oldest first, until cost fits.
      local to_free = used + cost - limit
      local live = entries or redis.call('ZRANGEBYSCORE', rule.log, '(' .. num(now - window), '+inf', 'WITHSCORES')
      local frees_at = now
      for i = 1, #live, 2 do
        frees_at = tonumber(live[i + 1]) + window
        to_free = to_free - member_cost(live[i])
        if to_free <= 0 then
          break
        end
      end
      retry_after = math.max(frees_at - now, 0)
    end
    if allowed then
      used = used + cost
      newest = math.max(newest or now, now)
    end
    local reset_after = 0
    if used > 0 and newest then
      reset_after = math.max(newest + window - now, 0)
    end
    return allowed, math.max(limit - used, 0), reset_after, retry_after
  end

  function sliding_log.step(rule, stored, now, cost, commit)
    local window, LOG = rule.window, rule.log
    -- Without our total, whatever the set holds (left by another algorithm's era) means nothing.
    -- (ZCARD also makes Redis answer WRONGTYPE if someone else wrote another type there.)
    local fresh = not stored.n
    if fresh and redis.call('ZCARD', LOG) > 0 and commit then
      redis.call('DEL', LOG)
    end
    local total = stored.n or 0

    local expired_cost = 0
    local newest_member, newest = nil, nil
    local entries = stored.entries
    if entries then
      -- Worked out at now by a call that only looks (never a commit): every entry is in the window.
      newest_member, newest = entries[#entries - 1], entries[#entries]
    elseif not fresh then
      for _, member in ipairs(redis.call('ZRANGEBYSCORE', LOG, '-inf', num(now - window))) do
        expired_cost = expired_cost + member_cost(member)
      end
      local last = redis.call('ZRANGE', LOG, -1, -1, 'WITHSCORES')
      if #last == 2 then
        newest_member, newest = last[1], tonumber(last[2])
      end
    end
    local allowed, remaining, reset_after, retry_after =
      answer(rule, total - expired_cost, newest, now, cost, entries)
    if commit then
      redis.call('ZREMRANGEBYSCORE', LOG, '-inf', num(now - window))
      total = total - expired_cost
      if allowed then
        total = total + cost
        if newest and newest >= now then
          -- Same microsecond (or a clock that stepped back): merge into the newest entry.
          redis.call('ZREM', LOG, newest_member)
          redis.call('ZADD', LOG, num(newest), num(newest) .. ':' .. num(member_cost(newest_member) + cost))
        else
          redis.call('ZADD', LOG, num(now), num(now) .. ':' .. num(cost))
        end
      end
      save(rule, 'n', total)
    end
    return allowed, remaining, reset_after, retry_after
  end

  -- A spend always goes into the newest entry, so right after it that entry's time is the mark.
  function sliding_log.mark(rule)
    local last = redis.call('ZRANGE', rule.log, -1, -1, 'WITHSCORES')
    if #last == 2 then
      return tonumber(last[2])
    end
    return 0
  end

  -- Takes the cost back out of the entry at the mark (later requests of the same microsecond may
  -- share it); an entry already expired and trimmed has nothing left to undo.
  function sliding_log.refund(rule, stored, cost, mark)
    if not stored.n then
      return
    end
    local LOG = rule.log
    local members = redis.call('ZRANGEBYSCORE', LOG, num(mark), num(mark))
    if #members == 0 then
      return
    end
    local member = members[1]
    local given = math.min(member_cost(member), cost)
    redis.call('ZREM', LOG, member)
    if member_cost(member) > given then
      redis.call('ZADD', LOG, num(mark), num(mark) .. ':' .. num(member_cost(member) - given))
    end
    save(rule, 'n', math.max(stored.n - given, 0))
  end

  -- A refund asked for by the caller: port of SlidingLog::refund. Newest entries first, while
  -- they are still in the window.
  function sliding_log.give_back(rule, stored, now, cost)
    if not stored.n then
      return
    end
    local LOG, left, total = rule.log, cost, stored.n
    while left > 0 do
      local last = redis.call('ZRANGE', LOG, -1, -1, 'WITHSCORES')
      if #last < 2 then
        break
      end
      local member, t = last[1], tonumber(last[2])
      if t + rule.window <= now then
        break
      end
      local n = member_cost(member)
      local given = math.min(left, n)
      redis.call('ZREM', LOG, member)
      if n > given then
        redis.call('ZADD', LOG, num(t), num(t) .. ':' .. num(n - given))
      end
      total = total - given
      left = left - given
    end
    save(rule, 'n', math.max(total, 0))
  end

  -- A charge: port of SlidingLog::charge. Drops the expired entries, then records the cost
  -- whatever is left: a new entry, or the newest one (taking the charge's time) once the log
  -- holds limit + 1 entries. Returns the answer a step of cost 1 would give on the log written
  -- (every entry left is in the window), then the debt.
  function sliding_log.charge(rule, stored, now, cost)
    local limit, window, LOG = rule.limit, rule.window, rule.log
    local fresh = not stored.n
    if fresh and redis.call('ZCARD', LOG) > 0 then
      redis.call('DEL', LOG)
    end
    local total = stored.n or 0
    if not fresh then
      for _, member in ipairs(redis.call('ZRANGEBYSCORE', LOG, '-inf', num(now - window))) do
        total = total - member_cost(member)
      end
      redis.call('ZREMRANGEBYSCORE', LOG, '-inf', num(now - window))
    end
    if total + cost > MAX_COUNT then
      cost = math.max(MAX_COUNT - total, 0)
    end
    local last = redis.call('ZRANGE', LOG, -1, -1, 'WITHSCORES')
    local newest = last[2] and tonumber(last[2])
    if cost > 0 then
      -- Every entry holds at least 1, so a log whose total is within the limit has at most
      -- limit entries: only a log in debt is counted.
      local full = total > limit and redis.call('ZCARD', LOG) > limit
      if newest and (full or newest >= now) then
        -- Same microsecond, or a full log: the newest entry takes the cost, at the later time.
        local t = math.max(newest, now)
        redis.call('ZREM', LOG, last[1])
        redis.call('ZADD', LOG, num(t), num(t) .. ':' .. num(member_cost(last[1]) + cost))
        newest = t
      else
        redis.call('ZADD', LOG, num(now), num(now) .. ':' .. num(cost))
        newest = now
      end
      total = total + cost
    end
    save(rule, 'n', total)
    local allowed, remaining, reset_after, retry_after = answer(rule, total, newest, now, 1)
    return allowed, remaining, reset_after, retry_after, total - limit
  end

  -- An empty log charged units at now, written nowhere (see charged in prelude.lua): what
  -- charge would write, the one entry kept in the state as the set's reply would list it.
  function sliding_log.charged(_, now, units)
    if units > MAX_COUNT then
      units = MAX_COUNT
    end
    return {n = units, entries = {num(now) .. ':' .. num(units), now}}
  end

  -- Units logged in the window ending at now: port of SlidingLog::spent. Without our total,
  -- whatever the set holds means nothing (see step).
  function sliding_log.spent(rule, stored, now)
    if not stored.n then
      return 0
    end
    local spent = 0
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', rule.log, '(' .. num(now - rule.window), '+inf')) do
      spent = spent + member_cost(member)
    end
    return spent
  end

  return sliding_log
end
