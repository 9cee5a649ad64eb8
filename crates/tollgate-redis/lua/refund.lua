-- tollgate refund: gives back what a reserve spent, for a request that another slot of a Redis
-- Cluster denied (see src/store.rs). Runs after common.lua, prelude.lua and the algorithm files.
--
-- KEYS     as for the decision script, for the rules to refund
-- ARGV[1]  now in µs since the Unix epoch, or "" to use Redis TIME
-- ARGV[2]  the number of rules, N
-- ARGV[3]  "refund"
-- ARGV[4..] N rule records (see prelude.lua), each with the cost it spent and the mark the
--          reserve reported
-- Returns  5 integers per rule, as the decision script: what a peek says after the refund
--
-- Counters and logs lose exactly the spend (when the spend's window or entry has already passed,
-- there is nothing left to undo); buckets and GCRA get the cost back, clamped to a full budget.

local NOW = now_us(ARGV[1])
local rules = read_rules()

for _, rule in ipairs(rules) do
  local stored = load(rule)
  rule.impl.refund(rule, stored, rule.cost, rule.mark)
end

local reply = {}
for _, rule in ipairs(rules) do
  answer(reply, rule, decide(rule, NOW, false))
end
return reply
