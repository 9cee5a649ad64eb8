-- tollgate rule helpers: shared by the decision and refund scripts (after common.lua, in front
-- of the algorithm files and the driver; see src/scripts.rs).
--
-- Each algorithm file registers, in ALGORITHMS under its name (the core's Algorithm::name), a
-- function that builds its table: only the algorithms a call uses are built (a script runs from
-- the top on every call, and defining every algorithm's functions each time would cost more than
-- deciding; in the function library, a table is built once per load). The table has:
--   fields  its hash fields
--   log     true when it also keeps a sorted set (one more key)
--   params(rule, p1, p2, p3)  reads its parameters from the rule's record into the rule
--   step(rule, stored, now, cost, commit)  the port of its core step function; returns allowed
--           (boolean), remaining, reset_after_us, retry_after_us, and optionally whether it
--           continued a window the state already counts in (so its expiry already covers it)
--   mark(rule)  after a committed spend: where it went (read back from the state), for a refund
--   refund(rule, stored, cost, mark)  gives back a spend of cost made at mark
--   charge(rule, stored, now, cost)  the port of its core charge function: records cost
--           whatever is left; returns what a step of cost 1 would answer right after (allowed,
--           remaining, reset_after_us, retry_after_us, computed from the state it wrote), the
--           debt, and optionally whether it continued a window the state already counts in
--
-- A rule is one record of RULE_FIELDS values in ARGV, from ARGV[4] on (in a batch, the call's
-- distinct records come first and each request names its records by number: see batch.lua):
--   algorithm name, cost, role (1 for a shadow rule, plus 2 for a question, which is decided but
--   never spent: "0" to "3"), the penalty ("0" for none; else the block of each offense in
--   µs joined by commas, then for an escalating penalty "/" and its memory in µs: see
--   Penalty::wire), mark (what a
--   reserve reported; "0" when deciding), then three parameters (listed in the algorithm's
--   file, "" when unused)
-- and its keys in KEYS, in the same order: its state hash, a sliding log's set next, then its
-- override hash (always: whether a key has an override is only known in Redis).
-- An override hash (written by the store's set_override, see src/overrides.rs) holds "a" = the
-- algorithm name and "p1", "p2", "p3" = parameters in the record's format; when its algorithm is
-- the rule's, they replace the record's parameters (the port of Override::apply_to). Otherwise
-- (no override, or one left by an algorithm the policy no longer uses) the record's stand.
-- A state hash holds the algorithm's fields, "a" = the algorithm name, "b" = blocked until
-- (µs since the Unix epoch), under an escalating penalty "o" = offenses in a row, and "v" =
-- whether the key had an override hash when the state was written ("0" or "1"; override.lua
-- sets it to "1" on a state that exists). A state of the rule's algorithm with "v" = "0" proves
-- the key has no override, so the override hash is read only for a new state, a state of
-- another algorithm, or "v" = "1": most decisions of a busy key skip that read. A key holding
-- another type makes Redis answer WRONGTYPE, which the store reports as a corrupt value.

local ALGORITHMS = {}
local BUILT = {}
local RULE_FIELDS = 8

-- The algorithm named name, built on first use.
local function algorithm(name)
  local built = BUILT[name]
  if not built then
    local build = ALGORITHMS[name]
    if not build then
      error('TOLLGATE_BAD_CALL unknown algorithm ' .. tostring(name))
    end
    built = build()
    -- What load reads: the penalty, the override mark, then the algorithm's fields.
    built.read = {'a', 'b', 'o', 'v', unpack(built.fields)}
    BUILT[name] = built
  end
  return built
end

-- The rule's parameters, once per call, on its first load (raw is what load read): an
-- override's when the key has one of the rule's algorithm; else the record's stand (see
-- read_record). The limit in force (limit, capacity or burst) is reported with every answer.
local function resolve(rule, raw)
  local found = nil
  if raw[1] ~= rule.algorithm or raw[4] ~= '0' then
    if redis.call('EXISTS', rule.override) == 1 then
      found = redis.call('HMGET', rule.override, 'a', 'p1', 'p2', 'p3')
    end
  end
  rule.overridden = found ~= nil
  if found and found[1] == rule.algorithm then
    rule.impl.params(rule, found[2], found[3] or '', found[4] or '')
    rule.max = rule.limit or rule.capacity or rule.burst
  end
  rule.resolved = true
end

-- The state of a key that has none of the rule's algorithm; never written to (no step writes
-- to the state it is given).
local NO_STATE = {}

-- Reads the penalty and the algorithm's fields in one call; a state written by another
-- algorithm reads as empty (its penalty still holds). Returns the state, blocked until, and the
-- offense count.
local function load(rule)
  local fields = rule.impl.fields
  local raw = redis.call('HMGET', rule.state, unpack(rule.impl.read))
  if not rule.resolved then
    resolve(rule, raw)
  end
  -- Most states carry no penalty: their absent fields are not parsed.
  local blocked_until, offenses = raw[2], raw[3]
  blocked_until = blocked_until and int(blocked_until, 'b') or 0
  offenses = offenses and int(offenses, 'o') or 0
  if raw[1] ~= rule.algorithm then
    return NO_STATE, blocked_until, offenses
  end
  local state = {}
  for i = 1, #fields do
    local name = fields[i]
    state[name] = int(raw[i + 4], name)
  end
  return state, blocked_until, offenses
end

-- A rule's penalty field: the block of each offense (µs), and the memory (µs, 0 when the
-- penalty does not escalate). "0" is no penalty: one step of 0.
local NO_PENALTY = {0}
local PENALTIES = {}
local function penalty(spec)
  if spec == '0' then
    return NO_PENALTY, 0
  end
  local known = PENALTIES[spec]
  if known then
    return known[1], known[2]
  end
  local list, memory = string.match(spec, '^([%d,]+)/(%d+)$')
  if not list then
    list, memory = spec, '0'
  end
  local steps = {}
  for step in string.gmatch(list, '%d+') do
    steps[#steps + 1] = tonumber(step)
  end
  if #steps == 0 then
    error('TOLLGATE_BAD_CALL bad penalty ' .. tostring(spec))
  end
  memory = tonumber(memory)
  PENALTIES[spec] = {steps, memory}
  return steps, memory
end

-- Writes the algorithm's fields, given as name and integer pairs (one to three: no algorithm
-- has more), with the algorithm's name and the override mark. Spelled out for each count: a
-- table of the fields, walked and unpacked, costs more than the write itself.
local function save(rule, f1, v1, f2, v2, f3, v3)
  local mark = rule.overridden and '1' or '0'
  if f3 then
    redis.call('HSET', rule.state, 'a', rule.algorithm, 'v', mark, f1, num(v1), f2, num(v2), f3, num(v3))
  elseif f2 then
    redis.call('HSET', rule.state, 'a', rule.algorithm, 'v', mark, f1, num(v1), f2, num(v2))
  else
    redis.call('HSET', rule.state, 'a', rule.algorithm, 'v', mark, f1, num(v1))
  end
end

-- The rule record whose values start at ARGV[at + 1], read: what every rule of a call that
-- uses it shares. Its parameters are read here once; a rule whose key has an override of the
-- same algorithm replaces them with the override's (see resolve).
local function read_record(at)
  local name, role = ARGV[at + 1], ARGV[at + 3]
  local impl = algorithm(name)
  local record = {
    algorithm = name,
    impl = impl,
    cost = tonumber(ARGV[at + 2]),
    shadow = role == '1' or role == '3',
    question = role == '2' or role == '3',
    mark = tonumber(ARGV[at + 5]),
  }
  record.steps, record.memory = penalty(ARGV[at + 4])
  record.block_for = record.steps[1]
  impl.params(record, ARGV[at + 6], ARGV[at + 7], ARGV[at + 8])
  record.max = record.limit or record.capacity or record.burst
  record.rule = {__index = record}
  return record
end

-- A rule: its record's values, its keys from KEYS[k] on (its state hash, a sliding log's set,
-- its override hash), and what its own call sets on it (an override's parameters, whether it
-- has one). Returns the rule and the index of KEYS just past its keys.
local function rule_of(record, k)
  local state, log = KEYS[k], nil
  k = k + 1
  if record.impl.log then
    log = KEYS[k]
    k = k + 1
  end
  local override = KEYS[k]
  if not state or (record.impl.log and not log) or not override then
    error('TOLLGATE_BAD_CALL too few keys for the rules')
  end
  -- Made with every field its call sets (see resolve): a table that grows is rebuilt as it does.
  local rule = {state = state, log = log, override = override, overridden = false, resolved = false}
  return setmetatable(rule, record.rule), k + 1
end

-- The rules of one request: its record count at ARGV[a + 1] and its records from ARGV[a + 3]
-- on (ARGV[a] is its now, ARGV[a + 2] its mode), its keys from KEYS[k] on. Returns the rules and
-- the ARGV and KEYS indices just past the request, where the next request starts.
local function read_request_rules(a, k)
  local count = tonumber(ARGV[a + 1])
  if not count or count < 1 or #ARGV < a + 2 + count * RULE_FIELDS then
    error('TOLLGATE_BAD_CALL expected ' .. tostring(ARGV[a + 1]) .. ' rules of ' .. RULE_FIELDS .. ' arguments')
  end
  local rules = {}
  for i = 1, count do
    rules[i], k = rule_of(read_record(a + 2 + (i - 1) * RULE_FIELDS), k)
  end
  return rules, a + 3 + count * RULE_FIELDS, k
end

-- The rules of a call that is one request (ARGV from 1, KEYS from 1), checked against each other;
-- `extra` values follow the records and `extra_keys` keys follow the rules' (0 unless the driver
-- takes arguments or keys of its own).
local function read_rules(extra, extra_keys)
  local rules, a, k = read_request_rules(1, 1)
  if a + (extra or 0) ~= #ARGV + 1 then
    error('TOLLGATE_BAD_CALL expected ' .. tostring(ARGV[2]) .. ' rules of ' .. RULE_FIELDS .. ' arguments')
  end
  if k + (extra_keys or 0) ~= #KEYS + 1 then
    error('TOLLGATE_BAD_CALL ' .. #KEYS .. ' keys for ' .. #rules .. ' rules')
  end
  return rules
end

-- The offenses in a row still remembered at now: port of algorithm::remembered_offenses.
local function remembered_offenses(rule, blocked_until, offenses, now)
  if #rule.steps > 1 and now < blocked_until + rule.memory then
    return offenses
  end
  return 0
end

-- How long the state must be kept for its offense count: port of algorithm::keep_until_us,
-- relative to now (0 when it has none).
local function keep_for(rule, blocked_until, offenses, now)
  if remembered_offenses(rule, blocked_until, offenses, now) > 0 then
    return blocked_until + rule.memory - now
  end
  return 0
end

-- The penalty on a step's answer: port of algorithm::penalize. A blocked key is denied until
-- the block ends; a denial by the algorithm under a penalty reports the block it starts (as long
-- as the step of this offense), and with commit starts it. Takes the step's answer (allowed,
-- remaining, reset_after_us, retry_after_us, continued) after the key's penalty, and returns
-- it with how long the state must be kept for its offense count (see keep_for) and whether the
-- state's expiry already covers this answer (a step that continued a window it counts in, with
-- no penalty involved: then there is no expiry to move).
local function penalize(rule, now, commit, blocked_until, offenses, allowed, remaining, reset_after, retry_after,
                        continued)
  if blocked_until > now then
    local blocked_for = blocked_until - now
    return false, 0, math.max(reset_after, blocked_for), math.max(retry_after, blocked_for),
      keep_for(rule, blocked_until, offenses, now), false
  end
  if offenses == 0 and rule.block_for == 0 then
    -- No penalty and no offense remembered (most rules): nothing to start, forget or keep.
    return allowed, remaining, reset_after, retry_after, 0, continued
  end
  local remembered = remembered_offenses(rule, blocked_until, offenses, now)
  if not allowed and rule.block_for > 0 then
    -- One more offense in a row, or a first one; never past the last step.
    local offense = math.min(remembered + 1, #rule.steps)
    local block_for = rule.steps[offense]
    if commit then
      blocked_until = now + block_for
      if #rule.steps > 1 then
        offenses = offense
        redis.call('HSET', rule.state, 'b', num(blocked_until), 'o', num(offenses))
      else
        offenses = 0
        redis.call('HSET', rule.state, 'b', num(blocked_until))
        redis.call('HDEL', rule.state, 'o')
      end
    end
    remaining = 0
    reset_after = math.max(reset_after, block_for)
    retry_after = math.max(retry_after, block_for)
    continued = false
  elseif commit and remembered == 0 and offenses > 0 then
    offenses = 0
    redis.call('HDEL', rule.state, 'o')
  end
  local keep = keep_for(rule, blocked_until, offenses, now)
  return allowed, remaining, reset_after, retry_after, keep, continued and keep == 0
end

-- One rule, penalty included: port of algorithm::decide. Returns what penalize returns.
local function decide(rule, now, commit)
  local stored, blocked_until, offenses = load(rule)
  -- A blocked key's step only answers: nothing is spent while the block holds.
  local spends = commit and blocked_until <= now
  return penalize(rule, now, commit, blocked_until, offenses, rule.impl.step(rule, stored, now, rule.cost, spends))
end

-- Appends one rule's answer to a reply: {allowed (1 or 0), remaining, reset_after_us,
-- retry_after_us (0 when allowed), limit (the limit, capacity or burst in force)}.
local function answer(reply, rule, allowed, remaining, reset_after, retry_after)
  local n = #reply
  if allowed then
    reply[n + 1], retry_after = 1, 0
  else
    reply[n + 1] = 0
  end
  reply[n + 2] = remaining
  reply[n + 3] = reset_after
  reply[n + 4] = retry_after
  reply[n + 5] = rule.max
end
