-- tollgate decision: every rule of one request, decided in one atomic call. The driver around
-- the algorithms: a port of MemoryStore::decide_many (all or nothing), each rule through
-- decide() in prelude.lua (the port of algorithm::decide, the penalty).
--
-- KEYS     for each rule, in order: its state hash, and for a sliding log its sorted set next
--          to it (see prelude.lua)
-- ARGV[1]  now in µs since the Unix epoch, or "" to use Redis TIME
-- ARGV[2]  the number of rules, N (at least 1)
-- ARGV[3]  "peek" (change nothing), "commit", or "reserve" (commit, and also report where each
--          spend went, so that a refund can undo it exactly)
-- ARGV[4..] N rule records of 8 values (see prelude.lua)
-- Returns  4 integers per rule, in order: allowed (1 or 0), remaining, reset_after_us,
--          retry_after_us (0 when allowed); with "reserve", then one mark per rule (where its
--          spend went, 0 when it spent nothing)
--
-- With a commit: if an enforced (non-shadow) rule denies, nothing is spent on any rule and only
-- the rules that denied start their block_for penalty; otherwise every rule spends. A question
-- takes part in the decision but is never spent and starts no penalty. The rules
-- that would have allowed in a denied request report their untouched budget.

local NOW = now_us(ARGV[1])
local MODE = ARGV[3]
local COMMIT = MODE ~= 'peek'
local rules = read_rules()

-- The state means nothing once the budget is full again, so it lives exactly that long (rounded
-- up to whole ms); an idle key vanishes on its own.
local function expire(rule, reset_after)
  local ttl_ms = idiv(reset_after + 999, 1000)
  for _, key in ipairs({rule.state, rule.log}) do
    if ttl_ms > 0 then
      redis.call('PEXPIRE', key, ttl_ms)
    else
      redis.call('DEL', key)
    end
  end
end

local outcomes = {}
local function commit(i)
  outcomes[i] = {decide(rules[i], NOW, true)}
  expire(rules[i], outcomes[i][3])
end

if #rules == 1 then
  -- One rule: a denial changes nothing but the penalty, so there is no need to look first.
  if COMMIT and not rules[1].question then
    commit(1)
  else
    outcomes[1] = {decide(rules[1], NOW, false)}
  end
else
  -- Phase 1: look at every rule.
  local denied = false
  for i, rule in ipairs(rules) do
    outcomes[i] = {decide(rule, NOW, false)}
    if not rule.shadow and not outcomes[i][1] then
      denied = true
    end
  end
  -- Phase 2: allowed, every rule spends; denied, only the rules that denied start a penalty.
  if COMMIT then
    for i, rule in ipairs(rules) do
      if not rule.question and (not denied or (not outcomes[i][1] and rule.block_for > 0)) then
        commit(i)
      end
    end
  end
end

local reply = {}
for i = 1, #rules do
  answer(reply, unpack(outcomes[i]))
end
if MODE == 'reserve' then
  for i, rule in ipairs(rules) do
    if outcomes[i][1] and not rule.question then
      reply[#reply + 1] = rule.impl.mark(rule)
    else
      reply[#reply + 1] = 0
    end
  end
end
return reply
