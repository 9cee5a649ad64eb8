-- tollgate decision prelude: shared by every decision script (after common.lua, in front of the
-- algorithm's file and the epilogue in decide.lua). Ports algorithm::decide from the core crate.
--
-- KEYS[1]  the (policy, key) state hash: algorithm fields, "a" = algorithm name, "b" = blocked
--          until (µs since the Unix epoch)
-- KEYS[2]  sliding_log only: the sorted set of admitted requests
-- ARGV[1]  now in µs since the Unix epoch, or "" to use Redis TIME
-- ARGV[2]  cost (validated by the caller: 1 to the policy's limit)
-- ARGV[3]  "1" to commit, "0" to peek (changes nothing)
-- ARGV[4]  block_for in µs, "0" for no penalty
-- ARGV[5]  the algorithm name, written to "a"
-- ARGV[6..] the algorithm's parameters, listed in its file
-- Returns  {allowed (1 or 0), remaining, reset_after_us, retry_after_us (0 when allowed)}

-- A key holding another type makes Redis answer WRONGTYPE, which the store reports as a
-- corrupt value.
local STATE = KEYS[1]

local NOW = now_us(ARGV[1])
local COST = tonumber(ARGV[2])
local COMMIT = ARGV[3] == '1'
local BLOCK_FOR = tonumber(ARGV[4])
local ALGORITHM = ARGV[5]

-- Reads the penalty and the algorithm's fields in one call; a state written by another
-- algorithm reads as empty (its penalty still holds).
local function load(fields)
  local raw = redis.call('HMGET', STATE, 'a', 'b', unpack(fields))
  local state = {}
  if raw[1] == ALGORITHM then
    for i, name in ipairs(fields) do
      state[name] = int(raw[i + 2], name)
    end
  end
  return state, int(raw[2], 'b') or 0
end

-- Writes the algorithm's fields (a table of name -> integer).
local function save(state)
  local args = {'a', ALGORITHM}
  for name, value in pairs(state) do
    args[#args + 1] = name
    args[#args + 1] = num(value)
  end
  redis.call('HSET', STATE, unpack(args))
end
