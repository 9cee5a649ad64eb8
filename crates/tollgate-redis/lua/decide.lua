-- tollgate decision: every rule of one request, decided in one atomic call (request.lua says
-- how).
--
-- KEYS     for each rule, in order: its state hash, for a sliding log its sorted set next to
--          it, then its override hash (see prelude.lua); last, the slot's sequence (see
--          request.lua)
-- ARGV[1]  now in µs since the Unix epoch, or "" to use Redis TIME
-- ARGV[2]  the number of rules, N (at least 1)
-- ARGV[3]  "peek" (change nothing), "commit", "reserve" (commit, and also report where each
--          spend went, so that a refund can undo it exactly), or "charge" (record each rule's
--          cost whatever is left; the rules name distinct keys)
-- ARGV[4..] N rule records of 10 values (see prelude.lua)
-- Returns  5 integers per rule, in order: allowed (1 or 0), remaining, reset_after_us,
--          retry_after_us (0 when allowed), the limit in force; with "reserve", then one mark per rule (where its
--          spend went, 0 when it spent nothing); with "charge", each rule's 5 for a peek of cost
--          1 after its charge, the first 1 + its debt when in debt (see request.lua); last,
--          what the slot's sequence held before the call

local rules = read_rules(0, 1)
local reply = decide_request(rules, request_now(ARGV[1]), ARGV[3])
reply[#reply + 1] = sequence(KEYS[#KEYS], ARGV[3] ~= 'peek')
return reply
