-- tollgate charge: records every rule's cost whatever is left of its budget, in one atomic
-- call: a port of MemoryStore::charge, each rule through its algorithm's charge (the port of
-- algorithm::charge). Runs after common.lua, prelude.lua, the algorithm files and request.lua
-- (for request_now and expire; see src/scripts.rs).
--
-- KEYS     as for the decision script, for the rules to charge
-- ARGV[1]  now in µs since the Unix epoch, or "" to use Redis TIME
-- ARGV[2]  the number of rules, N; rules name distinct keys (the store adds up the rules of one
--          budget before calling)
-- ARGV[3]  "charge"
-- ARGV[4..] N rule records (see prelude.lua), each with the cost to record
-- Returns  6 integers per rule: the 5 of the decision script for what a check of cost 1 would
--          get right after the charge (a peek, penalty included), then the debt (units owed
--          beyond the budget, 0 when none)
--
-- A charge is never refused: a key without enough left goes into debt, which its algorithm
-- pays back the way it forgets spending (see each algorithm file's "Charge"). It starts no
-- penalty and lifts none. The TTL is set from the peek's reset time, so a key in debt lives
-- until its debt is paid and its budget is whole again.

local NOW = request_now(ARGV[1])
local rules = read_rules()

local reply = {}
for _, rule in ipairs(rules) do
  local stored = load(rule)
  local debt = rule.impl.charge(rule, stored, NOW, rule.cost)
  rule.cost = 1
  local allowed, remaining, reset_after, retry_after, keep = decide(rule, NOW, false)
  expire(rule, reset_after, keep, false)
  answer(reply, rule, allowed, remaining, reset_after, retry_after)
  reply[#reply + 1] = debt
end
return reply
