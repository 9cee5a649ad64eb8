-- tollgate lease: gives back the unused units of this instance's previous lease of one key, then
-- takes up to `want` units of its budget in the same atomic call (see src/lease.rs). Runs after
-- common.lua, prelude.lua and the algorithm files. Only for the fixed window, the token bucket
-- and GCRA, where a debit of n units is exactly n requests of cost 1.
--
-- KEYS      the rule's state hash, then its override hash (see prelude.lua)
-- ARGV[1]   now in µs since the Unix epoch, or "" to use Redis TIME
-- ARGV[2]   "1"
-- ARGV[3]   "lease"
-- ARGV[4..13] the rule record (see prelude.lua); its cost is the request's cost
-- ARGV[14]  want: the units to take, at least the cost
-- ARGV[15]  give back: the unused units of the previous lease (0 for none)
-- ARGV[16]  the previous lease's mark (for a fixed window, the start of the window it counted in)
-- Returns   allowed (1 or 0), remaining, reset_after_us, retry_after_us, limit (as the
--           decision script, for the request), then granted (the units taken, cost included; 0 when
--           denied) and the mark of the grant
--
-- The grant is the smaller of `want` and what the budget holds, and never less than the cost:
-- when the budget cannot cover the cost, the request is decided exactly as the decision script
-- would (denied, penalty included). A blocked key grants nothing. The units are spent here at
-- once, so every other instance sees them gone: the fleet never admits more than the limit.

local NOW = now_us(ARGV[1])
local rule = read_rules(3)[1]
local WANT = tonumber(ARGV[4 + RULE_FIELDS])
local GIVE_BACK = tonumber(ARGV[5 + RULE_FIELDS])
local GIVE_MARK = tonumber(ARGV[6 + RULE_FIELDS])
local COST = rule.cost

if GIVE_BACK > 0 then
  local stored = load(rule, NOW, true)
  rule.impl.refund(rule, stored, GIVE_BACK, GIVE_MARK)
end

-- A look at cost 0 tells what the budget holds now (nothing while the key is blocked).
rule.cost = 0
local open, available = decide(rule, NOW, false, true)
local grant = COST
if open and available > COST then
  grant = math.min(math.max(WANT, COST), available)
end

rule.cost = grant
local allowed, remaining, reset_after, retry_after, keep_for = decide(rule, NOW, true)
if not allowed and grant > COST then
  -- Cannot happen (the look said the budget holds it); decide the cost alone to stay exact.
  rule.cost = COST
  allowed, remaining, reset_after, retry_after, keep_for = decide(rule, NOW, true)
end

local ttl_ms = idiv(math.max(reset_after, keep_for) + 999, 1000)
if ttl_ms > 0 then
  redis.call('PEXPIRE', rule.state, ttl_ms)
else
  redis.call('DEL', rule.state)
end

local reply = {}
answer(reply, rule, allowed, remaining, reset_after, retry_after)
if allowed then
  reply[#reply + 1] = rule.cost
  reply[#reply + 1] = rule.impl.mark(rule)
else
  reply[#reply + 1] = 0
  reply[#reply + 1] = 0
end
return reply
