-- tollgate batch: many requests, each decided as the decision script would decide it alone, in
-- order, in one call. The requests are independent: each is all or nothing on its own rules (a
-- denied request changes nothing for the others but what its own rules would), and an error in
-- one (a key holding a value we did not write) is that request's answer, not the batch's.
-- Running many requests per call pays the script's entry cost (loading the library, reading
-- the time) once for all of them.
--
-- KEYS     every request's keys, one request after the other (as for decide.lua); last, the
--          slot's sequence (see request.lua)
-- ARGV[1]  the number of requests, M (at least 1)
-- ARGV[2]  the number of distinct rule records, R (at least 1); then those R records (see
--          prelude.lua), the same record written once however many requests use it
-- then     the M requests in order, in runs of requests that share their head: each run is
--          how many requests it holds (at least 1), then their head: now ("" for Redis TIME),
--          the number of rules N, the mode (as decide.lua's ARGV[1..3]), then N record numbers
--          (1 to R), in order. Under load most requests of a call share one head (one policy,
--          Redis time, commit), so the call carries it once rather than once per request: Redis
--          turns every argument into a Lua string before the script runs.
-- Returns  M answers in order, in one flat array: each the integers decide.lua would reply for
--          that request alone, or for a request that failed, its error as one string, code
--          first (the caller knows how many integers each request has); last, what the slot's
--          sequence held before the call

local count, record_count = tonumber(ARGV[1]), tonumber(ARGV[2])
if not count or count < 1 or not record_count or record_count < 1 then
  error('TOLLGATE_BAD_CALL expected numbers of requests and records, got ' .. tostring(ARGV[1]) .. ' and ' .. tostring(ARGV[2]))
end
-- Every record and request is read first, so a malformed call changes nothing. Records are
-- found by their number as written ("1", "2", ...): turning text into a number is the costliest
-- thing Lua does here (strtod), so each request's numbers are compared as text.
local records = {}
for j = 1, record_count do
  records[tostring(j)] = read_record(2 + (j - 1) * RULE_FIELDS)
end
-- Each request's rules, now and mode, by its number.
local rules_of, now_of, mode_of = {}, {}, {}
local writes = false
local a, k, i = 3 + record_count * RULE_FIELDS, 1, 0
while i < count do
  local run = ARGV[a] == '1' and 1 or tonumber(ARGV[a])
  if not run or run < 1 or run > count - i then
    error('TOLLGATE_BAD_CALL a run of ' .. tostring(ARGV[a]) .. ' requests after ' .. i .. ' of ' .. count)
  end
  local now, mode = ARGV[a + 1], ARGV[a + 3]
  local rule_count = ARGV[a + 2] == '1' and 1 or tonumber(ARGV[a + 2])
  if not rule_count or rule_count < 1 then
    error('TOLLGATE_BAD_CALL request ' .. (i + 1) .. ' has ' .. tostring(ARGV[a + 2]) .. ' rules')
  end
  local head = {}
  for r = 1, rule_count do
    local record = records[ARGV[a + 3 + r]]
    if not record then
      error('TOLLGATE_BAD_CALL request ' .. (i + 1) .. ' names record ' .. tostring(ARGV[a + 3 + r]))
    end
    head[r] = record
  end
  writes = writes or mode ~= 'peek'
  for _ = 1, run do
    i = i + 1
    local rules = {false} -- made with room for one rule, the common case, so it need not grow
    for r = 1, rule_count do
      rules[r], k = rule_of(head[r], k)
    end
    rules_of[i], now_of[i], mode_of[i] = rules, now, mode
  end
  a = a + 4 + rule_count
end
if a ~= #ARGV + 1 or k ~= #KEYS then
  error('TOLLGATE_BAD_CALL ' .. #ARGV .. ' arguments and ' .. #KEYS .. ' keys for ' .. count .. ' requests')
end

-- A failed request's answer is its error as text, code first ("WRONGTYPE ...",
-- "TOLLGATE_CORRUPT ..."): an error reply nested in the array would fail the whole reply in
-- most clients.
local function error_text(err)
  if type(err) == 'table' and err.err then
    return tostring(err.err)
  end
  local text = tostring(err)
  if string.match(text, '^[A-Z][A-Z_]* ') then
    return text
  end
  return 'ERR ' .. text
end

-- One flat reply, each request's integers in turn (an array per request would cost Redis more
-- to turn into a reply than deciding does); a failed request leaves its error text in their
-- place, one string.
local reply = {}
for i = 1, count do
  local start = #reply
  local ok, err = pcall(decide_request, rules_of[i], request_now(now_of[i]), mode_of[i], reply)
  if not ok then
    for j = #reply, start + 1, -1 do
      reply[j] = nil
    end
    reply[start + 1] = error_text(err)
  end
end
reply[#reply + 1] = sequence(KEYS[#KEYS], writes)
return reply
