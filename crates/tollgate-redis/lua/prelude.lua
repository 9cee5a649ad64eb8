-- tollgate rule helpers: shared by the decision and refund scripts (after common.lua, in front
-- of the algorithm files and the driver; see src/scripts.rs).
--
-- Each algorithm file registers, in ALGORITHMS under its name (the core's Algorithm::name), a
-- function that builds its table: only the algorithms a call uses are built (a script runs from
-- the top on every call, and defining every algorithm's functions each time would cost more than
-- deciding). The table has:
--   fields  its hash fields
--   log     true when it also keeps a sorted set (one more key)
--   params(rule, p1, p2, p3)  reads its parameters from the rule's record into the rule
--   step(rule, stored, now, cost, commit)  the port of its core step function; returns allowed
--           (boolean), remaining, reset_after_us, retry_after_us
--   mark(rule)  after a committed spend: where it went (read back from the state), for a refund
--   refund(rule, stored, cost, mark)  gives back a spend of cost made at mark
--
-- A rule is one record of RULE_FIELDS values in ARGV, from ARGV[4] on (from its request's fourth
-- value on, in a batch):
--   algorithm name, cost, role (1 for a shadow rule, plus 2 for a question, which is decided but
--   never spent: "0" to "3"), the penalty ("0" for none; else the block of each offense in
--   µs joined by commas, then for an escalating penalty "/" and its memory in µs: see
--   Penalty::wire), mark (what a
--   reserve reported; "0" when deciding), then three parameters (listed in the algorithm's
--   file, "" when unused)
-- and its keys in KEYS, in the same order: its state hash, a sliding log's set next, then its
-- override hash (always: whether a key has an override is only known by reading it).
-- An override hash (written by the store's set_override, see src/overrides.rs) holds "a" = the
-- algorithm name and "p1", "p2", "p3" = parameters in the record's format; when its algorithm is
-- the rule's, they replace the record's parameters (the port of Override::apply_to). Otherwise
-- (no override, or one left by an algorithm the policy no longer uses) the record's stand.
-- A state hash holds the algorithm's fields, "a" = the algorithm name, "b" = blocked until
-- (µs since the Unix epoch) and, under an escalating penalty, "o" = offenses in a row. A key
-- holding another type makes Redis answer WRONGTYPE, which the
-- store reports as a corrupt value.

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
    BUILT[name] = built
  end
  return built
end

-- Reads the penalty and the algorithm's fields in one call; a state written by another
-- algorithm reads as empty (its penalty still holds). Returns the state, blocked until, and the
-- offense count.
local function load(rule)
  local fields = rule.impl.fields
  local raw = redis.call('HMGET', rule.state, 'a', 'b', 'o', unpack(fields))
  local state = {}
  if raw[1] == rule.algorithm then
    for i, name in ipairs(fields) do
      state[name] = int(raw[i + 3], name)
    end
  end
  return state, int(raw[2], 'b') or 0, int(raw[3], 'o') or 0
end

-- A rule's penalty field: the block of each offense (µs), and the memory (µs, 0 when the
-- penalty does not escalate). "0" is no penalty: one step of 0.
local function penalty(spec)
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
  return steps, tonumber(memory)
end

-- Writes the algorithm's fields (a table of name -> integer).
local function save(rule, state)
  local args = {'a', rule.algorithm}
  for name, value in pairs(state) do
    args[#args + 1] = name
    args[#args + 1] = num(value)
  end
  redis.call('HSET', rule.state, unpack(args))
end

-- The rules of one request: its record count at ARGV[a + 1] and its records from ARGV[a + 3]
-- on (ARGV[a] is its now, ARGV[a + 2] its mode), its keys from KEYS[k] on. Returns the rules and
-- the ARGV and KEYS indices just past the request, where the next request of a batch starts.
local function read_request_rules(a, k)
  local count = tonumber(ARGV[a + 1])
  if not count or count < 1 or #ARGV < a + 2 + count * RULE_FIELDS then
    error('TOLLGATE_BAD_CALL expected ' .. tostring(ARGV[a + 1]) .. ' rules of ' .. RULE_FIELDS .. ' arguments')
  end
  local rules = {}
  for i = 1, count do
    local at = a + 2 + (i - 1) * RULE_FIELDS
    local impl = algorithm(ARGV[at + 1])
    local rule = {
      algorithm = ARGV[at + 1],
      impl = impl,
      cost = tonumber(ARGV[at + 2]),
      shadow = ARGV[at + 3] == '1' or ARGV[at + 3] == '3',
      question = ARGV[at + 3] == '2' or ARGV[at + 3] == '3',
      mark = tonumber(ARGV[at + 5]),
      state = KEYS[k],
    }
    k = k + 1
    if impl.log then
      rule.log = KEYS[k]
      k = k + 1
    end
    rule.override = KEYS[k]
    k = k + 1
    if not rule.state or (impl.log and not rule.log) or not rule.override then
      error('TOLLGATE_BAD_CALL too few keys for ' .. count .. ' rules')
    end
    rule.steps, rule.memory = penalty(ARGV[at + 4])
    rule.block_for = rule.steps[1]
    local o = redis.call('HMGET', rule.override, 'a', 'p1', 'p2', 'p3')
    if o[1] == rule.algorithm then
      impl.params(rule, o[2], o[3] or '', o[4] or '')
    else
      impl.params(rule, ARGV[at + 6], ARGV[at + 7], ARGV[at + 8])
    end
    -- The limit in force, reported with every answer: the limit, capacity or burst.
    rule.max = rule.limit or rule.capacity or rule.burst
    rules[i] = rule
  end
  return rules, a + 3 + count * RULE_FIELDS, k
end

-- The rules of a call that is one request (ARGV from 1, KEYS from 1), checked against each other;
-- `extra` values follow the records (0 unless the driver takes arguments of its own).
local function read_rules(extra)
  local rules, a, k = read_request_rules(1, 1)
  if a + (extra or 0) ~= #ARGV + 1 then
    error('TOLLGATE_BAD_CALL expected ' .. tostring(ARGV[2]) .. ' rules of ' .. RULE_FIELDS .. ' arguments')
  end
  if k ~= #KEYS + 1 then
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

-- One rule, penalty included: port of algorithm::decide. A blocked key is denied until the
-- block ends; a denial by the algorithm starts a block when the rule has a penalty, as long as
-- the step of this offense. Returns allowed, remaining, reset_after_us, retry_after_us, and how
-- long the state must be kept for its offense count (0 when it has none: port of
-- algorithm::keep_until_us, relative to now).
local function decide(rule, now, commit)
  local stored, blocked_until, offenses = load(rule)
  local step = rule.impl.step
  local function keep_for()
    if remembered_offenses(rule, blocked_until, offenses, now) > 0 then
      return blocked_until + rule.memory - now
    end
    return 0
  end
  if blocked_until > now then
    local blocked_for = blocked_until - now
    local _, _, reset, retry = step(rule, stored, now, rule.cost, false)
    return false, 0, math.max(reset, blocked_for), math.max(retry, blocked_for), keep_for()
  end
  local allowed, remaining, reset_after, retry_after = step(rule, stored, now, rule.cost, commit)
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
  elseif commit and remembered == 0 and offenses > 0 then
    offenses = 0
    redis.call('HDEL', rule.state, 'o')
  end
  return allowed, remaining, reset_after, retry_after, keep_for()
end

-- Appends one rule's answer to a reply: {allowed (1 or 0), remaining, reset_after_us,
-- retry_after_us (0 when allowed), limit (the limit, capacity or burst in force)}.
local function answer(reply, rule, allowed, remaining, reset_after, retry_after)
  if allowed then
    reply[#reply + 1], retry_after = 1, 0
  else
    reply[#reply + 1] = 0
  end
  reply[#reply + 1] = remaining
  reply[#reply + 1] = reset_after
  reply[#reply + 1] = retry_after
  reply[#reply + 1] = rule.max
end
