-- tollgate request: every rule of one request, decided all or nothing. A port of
-- MemoryStore::decide_many, each rule through decide() in prelude.lua (the port of
-- algorithm::decide, the penalty). Shared by the decision script (decide.lua: one request per
-- call) and the batch script (batch.lua: many requests per call, each decided by this in turn).
--
-- A request is, from ARGV[a] on: now in µs since the Unix epoch ("" for Redis TIME), the number
-- of rules N (at least 1), the mode, then N rule records (see prelude.lua); and its keys from
-- KEYS[k] on. The mode is "peek" (change nothing), "commit", "reserve" (commit, and also
-- report where each spend went, so that a refund can undo it exactly), or "charge" (record
-- every rule's cost whatever is left: see charge_request; its rules name distinct keys, the
-- store adds up the rules of one budget before calling).
-- Its answer: 5 integers per rule, in order: allowed (1 or 0), remaining, reset_after_us,
-- retry_after_us (0 when allowed), the limit in force (the policy's or its override's); with "reserve", then one mark per rule (where its spend went,
-- 0 when it spent nothing); with "charge", the same 5 per rule for what a check of cost 1 would
-- get right after the charge (a peek, penalty included), the first of them carrying the debt
-- (units owed beyond the budget): 1 when allowed, 0 when refused without debt, 1 + the debt when
-- in debt (a key in debt refuses a check of cost 1, so allowed and a debt never meet).
--
-- With a commit: if an enforced (non-shadow) rule denies, nothing is spent on any rule and only
-- the rules that denied start their block_for penalty; otherwise every rule spends. A question
-- takes part in the decision but is never spent and starts no penalty. The rules that would have
-- allowed in a denied request report their untouched budget. A peek, a question, and a rule of
-- a request of several that neither spends nor starts a penalty write nothing, not even the
-- migration of a state an earlier version of its policy wrote (see settle in prelude.lua). A peek, a question, and a rule
-- that neither spends nor starts a penalty write nothing, not even the migration of a state an
-- earlier version of the policy wrote (see settle in prelude.lua).

-- The slot's sequence, the last key of a decision or batch call (see src/state_loss.rs): a call
-- that may write (any mode but "peek") adds one to it, so it moves with every write this slot
-- takes and a replica promoted without some of those writes holds a smaller one. Returns what it
-- held before the call, 0 when there is none.
local function sequence(key, writes)
  if writes then
    return redis.call('INCR', key) - 1
  end
  return int(redis.call('GET', key), 'sequence') or 0
end

-- Redis TIME, read once per call: the requests of a batch share it (Redis time does not move
-- while a script runs anyway).
local redis_now = nil
local function request_now(given)
  if given ~= '' then
    return now_us(given)
  end
  if not redis_now then
    redis_now = now_us('')
  end
  return redis_now
end

-- The state means nothing once the budget is full again and no offense count is remembered, so
-- it lives exactly that long (rounded up to whole ms); an idle key vanishes on its own. A state
-- whose expiry already covers the answer (same_expiry: see decide) keeps it.
local function expire(rule, reset_after, keep_for, same_expiry)
  if same_expiry then
    return
  end
  local longest = reset_after
  if keep_for and keep_for > longest then
    longest = keep_for
  end
  local ttl_ms = idiv(longest + 999, 1000)
  if ttl_ms > 0 then
    ttl_ms = num(ttl_ms)
    redis.call('PEXPIRE', rule.state, ttl_ms)
    if rule.log then
      redis.call('PEXPIRE', rule.log, ttl_ms)
    end
  else
    redis.call('DEL', rule.state)
    if rule.log then
      redis.call('DEL', rule.log)
    end
  end
end

-- Decides one rule and spends on it, with its expiry; returns what decide returns, up to the
-- expiry's inputs.
local function commit_rule(rule, now)
  local allowed, remaining, reset_after, retry_after, keep, same_expiry = decide(rule, now, true)
  expire(rule, reset_after, keep, same_expiry)
  return allowed, remaining, reset_after, retry_after
end

-- A charge: a port of MemoryStore::charge, each rule through its algorithm's charge (the port
-- of algorithm::charge). It is never refused: a key without enough left goes into debt, which
-- its algorithm pays back the way it forgets spending (see each algorithm file's "Charge"). It
-- starts no penalty and lifts none. Its answer is the algorithm's own answer for a check of cost
-- 1 on the state the charge wrote, with the penalty on top (as a peek would report it), and the
-- TTL is set from that answer's reset time, so a key in debt lives until its debt is paid and
-- its budget is whole again.
local function charge_request(rules, now, reply)
  for i = 1, #rules do
    local rule = rules[i]
    local stored, blocked_until, offenses = load(rule, now, true)
    local allowed, remaining, reset_after, retry_after, debt, continued = rule.impl.charge(rule, stored, now, rule.cost)
    local keep
    allowed, remaining, reset_after, retry_after, keep =
      penalize(rule, now, false, blocked_until, offenses, allowed, remaining, reset_after, retry_after)
    expire(rule, reset_after, keep, continued and keep == 0)
    answer(reply, rule, allowed, remaining, reset_after, retry_after)
    if debt > 0 then
      -- Refused (a key in debt always is): its first integer carries the debt (see above).
      reply[#reply - 4] = debt + 1
    end
  end
  return reply
end

-- Decides the rules of one request and returns its answer (see above), appended to reply when
-- given (the batch script's one reply for every request).
local function decide_request(rules, now, mode, reply)
  reply = reply or {}
  if mode == 'charge' then
    return charge_request(rules, now, reply)
  end
  local committing = mode ~= 'peek'

  if #rules == 1 then
    -- One rule: a denial changes nothing but the penalty, so there is no need to look first.
    local rule = rules[1]
    local spends = committing and not rule.question
    local allowed, remaining, reset_after, retry_after
    if spends then
      allowed, remaining, reset_after, retry_after = commit_rule(rule, now)
    else
      allowed, remaining, reset_after, retry_after = decide(rule, now, false)
    end
    answer(reply, rule, allowed, remaining, reset_after, retry_after)
    if mode == 'reserve' then
      reply[#reply + 1] = (allowed and spends) and rule.impl.mark(rule) or 0
    end
    return reply
  end

  -- Phase 1: look at every rule, writing nothing (a rule whose state an earlier version of its
  -- policy wrote is migrated in phase 2, if it spends or starts a penalty: see settle).
  local outcomes = {}
  local denied = false
  for i, rule in ipairs(rules) do
    outcomes[i] = {decide(rule, now, false)}
    if not rule.shadow and not outcomes[i][1] then
      denied = true
    end
  end
  -- Phase 2: allowed, every rule spends; denied, only the rules that denied start a penalty.
  if committing then
    for i, rule in ipairs(rules) do
      if not rule.question and (not denied or (not outcomes[i][1] and rule.block_for > 0)) then
        outcomes[i] = {commit_rule(rule, now)}
      end
    end
  end

  for i = 1, #rules do
    answer(reply, rules[i], unpack(outcomes[i]))
  end
  if mode == 'reserve' then
    for i, rule in ipairs(rules) do
      if outcomes[i][1] and not rule.question then
        reply[#reply + 1] = rule.impl.mark(rule)
      else
        reply[#reply + 1] = 0
      end
    end
  end
  return reply
end
