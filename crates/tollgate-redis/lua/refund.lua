-- tollgate refund: gives back what a reserve spent, for a request that another slot of a Redis
-- Cluster denied (see src/store.rs). Runs after common.lua, prelude.lua and the algorithm files.
--
-- KEYS     as for the decision script, for the rules to refund
-- ARGV[1]  now in µs since the Unix epoch, or "" to use Redis TIME
-- ARGV[2]  the number of rules, N
-- ARGV[3]  "refund" (undo a reserve's spends, by their marks) or "give_back" (a refund the
--          caller asked for: Store::refund, port of algorithm::refund; no marks)
-- ARGV[4..] N rule records (see prelude.lua), each with the cost to give back and, for
--          "refund", the mark the reserve reported
-- Returns  5 integers per rule, as the decision script: what a peek says after the refund (of
--          the rule's cost for "refund", of cost 1 for "give_back")
--
-- Counters and logs lose exactly the spend (when the spend's window or entry has already passed,
-- there is nothing left to undo); buckets and GCRA get the cost back, clamped to a full budget.
-- "give_back" has no mark, so it takes from the newest spends still counting (the current
-- window of a counter, the newest entries of a log). A block is never lifted. TTLs stay: a
-- refund only shortens how long a state matters.

local NOW = now_us(ARGV[1])
local rules = read_rules()
local give_back = ARGV[3] == 'give_back'

for _, rule in ipairs(rules) do
  local stored = load(rule, NOW, true)
  if give_back then
    rule.impl.give_back(rule, stored, NOW, rule.cost)
    rule.cost = 1
  else
    rule.impl.refund(rule, stored, rule.cost, rule.mark)
  end
end

local reply = {}
for _, rule in ipairs(rules) do
  answer(reply, rule, decide(rule, NOW, false))
end
return reply
