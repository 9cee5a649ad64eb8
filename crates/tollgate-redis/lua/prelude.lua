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
--           debt (0 or below when none: what is left of the budget need not be worked out),
--           and optionally whether it continued a window the state already counts in
--   spent(rule, stored, now)  the port of its core spent function: the units the state has
--           spent at now, debt included (what a migration carries over: see settle)
--   charged(rule, now, units)  optional: the state an empty one holds once charged units at
--           now, as a table, written nowhere (see charged below); an algorithm without it is
--           charged with save keeping its fields in a table instead of writing them
--
-- A rule is one record of RULE_FIELDS values in ARGV, from ARGV[4] on (in a batch, the call's
-- distinct records come first and each request names its records by number: see batch.lua):
--   algorithm name, cost, role (1 for a shadow rule, plus 2 for a question, which is decided but
--   never spent: "0" to "3"), the penalty ("0" for none; else the block of each offense in
--   µs joined by commas, then for an escalating penalty "/" and its memory in µs: see
--   Penalty::wire), mark (what a
--   reserve reported; "0" when deciding), then three parameters (listed in the algorithm's
--   file, "" when unused), then the policy version's stamp ("<algorithm>/<fingerprint as 16 hex
--   digits>") and its version text ("<generation>|<on_change>|<parameters>": the three
--   parameters without an override, joined by spaces; a calendar quota's is only its limit)
-- and its keys in KEYS, in the same order: its state hash, a sliding log's set next, then its
-- override hash (always: whether a key has an override is only known in Redis).
-- An override hash (written by the store's set_override, see src/overrides.rs) holds "a" = the
-- algorithm name and "p1", "p2", "p3" = parameters in the record's format; when its algorithm is
-- the rule's, they replace the record's parameters (the port of Override::apply_to). Otherwise
-- (no override, or one left by an algorithm the policy no longer uses) the record's stand.
-- A state hash holds the algorithm's fields, "a" = the stamp of the policy version that wrote
-- it, "g" = that version's text (written when the state is created or migrated), "b" = blocked until
-- (µs since the Unix epoch), under an escalating penalty "o" = offenses in a row, and "v" =
-- whether the key had an override hash when the state was written ("0" or "1"; override.lua
-- sets it to "1" on a state that exists). A state of the rule's algorithm with "v" = "0" proves
-- the key has no override, so the override hash is read only for a new state, a state of
-- another algorithm, or "v" = "1": most decisions of a busy key skip that read. A key holding
-- another type makes Redis answer WRONGTYPE, which the store reports as a corrupt value.
--
-- A state stamped by another version of the policy (its algorithm or parameters changed under
-- the same name: a reload) is migrated by the first call that may write it (a check, a charge,
-- a refund), as the port of MemoryStore's settle and algorithm::migrate (see settle below): the
-- same state on every store, whichever instance of a fleet touches the key first. A call that
-- only looks (a peek, a question) works the migrated state out in Lua and answers from it,
-- writing nothing.

local ALGORITHMS = {}
local BUILT = {}
local RULE_FIELDS = 10

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
  if raw[1] ~= rule.stamp or raw[4] ~= '0' then
    if redis.call('EXISTS', rule.override) == 1 then
      found = redis.call('HMGET', rule.override, 'a', 'p1', 'p2', 'p3')
    end
  end
  rule.overridden = found ~= nil
  if found and found[1] == rule.algorithm then
    rule.impl.params(rule, found[2], found[3] or '', found[4] or '')
    rule.max = rule.limit or rule.capacity or rule.burst
    rule.forced = {found[2], found[3] or '', found[4] or ''}
  end
  rule.resolved = true
end

-- The state of a key that has none of the rule's algorithm; never written to (no step writes
-- to the state it is given).
local NO_STATE = {}

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
-- has more), with the version's stamp and the override mark. Spelled out for each count: a
-- table of the fields, walked and unpacked, costs more than the write itself.
local function save(rule, f1, v1, f2, v2, f3, v3)
  local dry = rule.dry
  if dry then
    -- A migration worked out for a call that only looks (see charged): kept, not written.
    dry[f1] = v1
    if f2 then
      dry[f2] = v2
    end
    if f3 then
      dry[f3] = v3
    end
    return
  end
  local mark = rule.overridden and '1' or '0'
  if not rule.stamped then
    -- A state this version creates or migrates also records the version (see settle).
    rule.stamped = true
    local stamp, version = rule.stamp, rule.version
    if f3 then
      redis.call('HSET', rule.state, 'a', stamp, 'g', version, 'v', mark, f1, num(v1), f2, num(v2), f3, num(v3))
    elseif f2 then
      redis.call('HSET', rule.state, 'a', stamp, 'g', version, 'v', mark, f1, num(v1), f2, num(v2))
    else
      redis.call('HSET', rule.state, 'a', stamp, 'g', version, 'v', mark, f1, num(v1))
    end
    return
  end
  if f3 then
    redis.call('HSET', rule.state, 'a', rule.stamp, 'v', mark, f1, num(v1), f2, num(v2), f3, num(v3))
  elseif f2 then
    redis.call('HSET', rule.state, 'a', rule.stamp, 'v', mark, f1, num(v1), f2, num(v2))
  else
    redis.call('HSET', rule.state, 'a', rule.stamp, 'v', mark, f1, num(v1))
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
    stamp = ARGV[at + 9],
    version = ARGV[at + 10],
    at = at,
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
  local rule = {
    state = state, log = log, override = override, overridden = false, resolved = false, stamped = false, dry = false,
  }
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

-- Whether the generation a is later than b (both decimal digits, as Rust wrote them): compared
-- as text, so it is exact at any size.
local function later(a, b)
  return #a > #b or (#a == #b and a > b)
end

-- A version text (see the rule record): its generation, on_change and parameters (the text,
-- then each of the three, "" when absent).
local function version_of(text)
  local generation, on_change, params = string.match(text or '', '^(%d+)|(%a+)|(.*)$')
  if not generation then
    corrupt('field g holds ' .. tostring(text))
  end
  local p1, p2, p3 = string.match(params, '^([^ ]*) ?([^ ]*) ?(.*)$')
  return generation, on_change, params, p1, p2, p3
end

-- A rule of the version of algorithm name with the version text's parameters: its impl, its
-- parameters and its limit (max). A calendar quota's periods are placed around each call's
-- time, so a version text only holds its limit, and its state stores its period's end (e) for
-- spent.
local function version_rule(name, p1, p2, p3)
  if not ALGORITHMS[name] then
    corrupt('field a names algorithm ' .. tostring(name))
  end
  local impl = algorithm(name)
  local version = {impl = impl}
  if name == 'calendar_quota' then
    version.limit = tonumber(p1)
  else
    impl.params(version, p1, p2, p3)
  end
  version.max = version.limit or version.capacity or version.burst
  if not version.max then
    corrupt('field g holds parameters ' .. tostring(p1) .. ' ' .. tostring(p2) .. ' ' .. tostring(p3))
  end
  return version
end

-- The units a key that spent `spent` of `old` carries to `new` as on_change says: port of
-- migrate::carried, the same float operations in the same order (scale rounds alike).
local function carried(on_change, spent, old, new)
  if on_change == 'keep' then
    return spent
  elseif on_change == 'scale' then
    return math.min(math.ceil((math.min(spent, old) / old) * new), new)
  end
  return 0
end

-- The parameters the rule decides with, in the version text's form: a key override's, or the
-- record's (which a prefix override may have replaced).
local function in_force(rule)
  local p = rule.forced or {ARGV[rule.at + 6], ARGV[rule.at + 7], ARGV[rule.at + 8]}
  if rule.algorithm == 'calendar_quota' then
    return p[1]
  end
  return p[1] .. ' ' .. p[2] .. ' ' .. p[3]
end

-- The algorithm's fields that load read (raw), as a state table (load does the same inline).
local function stored_of(rule, raw)
  local fields = rule.impl.fields
  local f1, f2, f3 = fields[1], fields[2], fields[3]
  if f3 then
    return {[f1] = int(raw[5], f1), [f2] = int(raw[6], f2), [f3] = int(raw[7], f3)}
  elseif f2 then
    return {[f1] = int(raw[5], f1), [f2] = int(raw[6], f2)}
  end
  return {[f1] = int(raw[5], f1)}
end

-- The penalty that load read (raw): blocked until, and the offense count (0 when absent).
local function penalty_of(raw)
  local blocked_until, offenses = raw[2], raw[3]
  return blocked_until and int(blocked_until, 'b') or 0, offenses and int(offenses, 'o') or 0
end

-- The state an empty one of the rule's algorithm holds once charged units at now (the port of
-- algorithm::charge on an empty state, as a migration records its units), worked out without
-- writing anything: what a call that only looks answers from.
local function charged(rule, now, units)
  if units == 0 then
    return NO_STATE
  end
  if rule.impl.charged then
    return rule.impl.charged(rule, now, units)
  end
  local fields = {}
  rule.dry = fields
  rule.impl.charge(rule, NO_STATE, now, units)
  rule.dry = false
  return fields
end

-- Brings a state stamped otherwise than the rule (raw is what load read) to the rule's version:
-- the port of MemoryStore's settle. Returns whether the state or the rule changed, so load reads
-- again. A call that does not write (writes false: a peek, a question) changes no key: where
-- the state would be written, it returns instead the state as it would be (its fields as a
-- table), blocked until and the offense count, for load to hand on.
-- - A state written before states carried their version (no "/" in its stamp): of the rule's
--   algorithm it is this version's (restamped); of another it reads as empty.
-- - Written by a later generation (an instance that reloaded first): the key is decided under
--   that version's algorithm and parameters, and keeps its stamp; an earlier version never
--   migrates it back. A later calendar quota cannot be rebuilt here (its periods are not
--   stored): a calendar quota rule decides it with its own periods and the later version's
--   limit; any other rule reads it as empty, as a state of another algorithm.
-- - The key has an override in force (parameters other than the version's): only restamped
--   (a state of another algorithm is emptied, its penalty kept), as the override decides it
--   before and after.
-- - Else migrated (migrate::migrate): the units spent under the old version at now, carried as
--   the rule's on_change says, are charged on an empty state of the rule's algorithm; reset
--   also drops the penalty, keep and scale keep it. The charge is a write of a new state, so
--   save also records the version (rule.stamped is false: the state was read as another's).
local function settle(rule, stamp, raw, now, writes)
  local state = rule.state
  local slash = string.find(stamp, '/', 1, true)
  if not slash then
    if stamp ~= rule.algorithm then
      return false
    end
    if not writes then
      return stored_of(rule, raw), penalty_of(raw)
    end
    redis.call('HSET', state, 'a', rule.stamp, 'g', rule.version)
    return true
  end
  local name = string.sub(stamp, 1, slash - 1)
  local generation, _, _, p1, p2, p3 = version_of(redis.call('HGET', state, 'g'))
  local own_generation, on_change, own_params = version_of(rule.version)

  if later(generation, own_generation) then
    if name == 'calendar_quota' then
      if rule.algorithm ~= 'calendar_quota' then
        return false
      end
      rule.limit = tonumber(p1)
    else
      -- The answer still reports the rule's own limit, as the memory store does.
      local version = version_rule(name, p1, p2, p3)
      version.max = nil
      for field, value in pairs(version) do
        rule[field] = value
      end
      rule.log = version.impl.log and (state .. ':log') or false
    end
    rule.stamp = stamp
    return true
  end

  local old = version_rule(name, p1, p2, p3)
  old.state, old.log = state, state .. ':log'
  local fields = old.impl.fields

  if in_force(rule) ~= own_params then
    if not writes then
      local blocked_until, offenses = penalty_of(raw)
      if name ~= rule.algorithm then
        return NO_STATE, blocked_until, offenses
      end
      return stored_of(rule, raw), blocked_until, offenses
    end
    if name ~= rule.algorithm then
      redis.call('HDEL', state, unpack(fields))
      if old.impl.log then
        redis.call('DEL', old.log)
      end
    end
    redis.call('HSET', state, 'a', rule.stamp, 'g', rule.version)
    return true
  end

  local values = redis.call('HMGET', state, unpack(fields))
  local stored = {}
  for i = 1, #fields do
    stored[fields[i]] = int(values[i], fields[i])
  end
  local units = carried(on_change, old.impl.spent(old, stored, now), old.max, rule.max)
  if not writes then
    local blocked_until, offenses = penalty_of(raw)
    if on_change == 'reset' then
      blocked_until, offenses = 0, 0
    end
    return charged(rule, now, units), blocked_until, offenses
  end
  redis.call('HDEL', state, unpack(fields))
  if old.impl.log then
    redis.call('DEL', old.log)
  end
  local blocked_until = raw[2] and int(raw[2], 'b') or 0
  local offenses = raw[3] and int(raw[3], 'o') or 0
  if on_change == 'reset' then
    redis.call('HDEL', state, 'b', 'o')
    blocked_until, offenses = 0, 0
  end
  -- What is left of the state is this version's, empty, with its penalty; its TTL stays (an
  -- empty state of the new version until then, as the memory store's slot).
  redis.call('HSET', state, 'a', rule.stamp, 'g', rule.version, 'v', rule.overridden and '1' or '0')
  -- The migrated state lives at least as long as a peek of it says it matters (what a charge
  -- of it would set), and a sliding log's new set as long as its state.
  local allowed, remaining, reset_after, retry_after
  if units > 0 then
    allowed, remaining, reset_after, retry_after = rule.impl.charge(rule, NO_STATE, now, units)
  else
    allowed, remaining, reset_after, retry_after = rule.impl.step(rule, NO_STATE, now, 1, false)
  end
  local _, keep
  _, _, reset_after, _, keep =
    penalize(rule, now, false, blocked_until, offenses, allowed, remaining, reset_after, retry_after)
  local ttl_ms = math.max(idiv(math.max(reset_after, keep) + 999, 1000), redis.call('PTTL', state))
  if ttl_ms > 0 then
    redis.call('PEXPIRE', state, ttl_ms)
    if rule.log and redis.call('EXISTS', rule.log) == 1 then
      redis.call('PEXPIRE', rule.log, ttl_ms)
    end
  end
  return true
end

-- Reads the penalty and the algorithm's fields in one call; a state written by another
-- algorithm reads as empty (its penalty still holds), and one written by another version of
-- the policy is settled first (see settle): migrated when the call writes, else worked out
-- without writing. Returns the state, blocked until, and the offense count.
local function load(rule, now, writes)
  local raw = redis.call('HMGET', rule.state, unpack(rule.impl.read))
  if not rule.resolved then
    resolve(rule, raw)
  end
  local stamp = raw[1]
  if stamp ~= rule.stamp and stamp then
    local settled, blocked_until, offenses = settle(rule, stamp, raw, now, writes)
    if settled == true then
      raw = redis.call('HMGET', rule.state, unpack(rule.impl.read))
      stamp = raw[1]
    elseif settled then
      rule.stamped = false
      return settled, blocked_until, offenses
    end
  end
  local stamped = stamp == rule.stamp
  rule.stamped = stamped
  -- Written out rather than through penalty_of and stored_of: a call costs Lua more than this.
  -- Most states carry no penalty: their absent fields are not parsed.
  local blocked_until, offenses = raw[2], raw[3]
  blocked_until = blocked_until and int(blocked_until, 'b') or 0
  offenses = offenses and int(offenses, 'o') or 0
  if not stamped then
    return NO_STATE, blocked_until, offenses
  end
  local fields = rule.impl.fields
  local f1, f2, f3 = fields[1], fields[2], fields[3]
  if f3 then
    return {[f1] = int(raw[5], f1), [f2] = int(raw[6], f2), [f3] = int(raw[7], f3)}, blocked_until, offenses
  elseif f2 then
    return {[f1] = int(raw[5], f1), [f2] = int(raw[6], f2)}, blocked_until, offenses
  end
  return {[f1] = int(raw[5], f1)}, blocked_until, offenses
end

-- One rule, penalty included: port of algorithm::decide. A call that writes (commit, or
-- writes: one that may spend on this rule later in the call) migrates a state written by an
-- earlier version of the policy; one that only looks does not (see settle). Returns what
-- penalize returns.
local function decide(rule, now, commit, writes)
  local stored, blocked_until, offenses = load(rule, now, commit or writes)
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
