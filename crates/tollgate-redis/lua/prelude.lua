-- tollgate decision prelude: shared by every decision script (concatenated in front of the
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
--
-- Numbers are Lua doubles: exact for integers below 2^53. The core's bounds keep every value and
-- product below that, and idiv is exact there (the rounding error of a / b is smaller than the
-- distance from a / b to the next integer whenever a < 2^53).

local function idiv(a, b)
  return math.floor(a / b)
end

local function num(n)
  return string.format('%.0f', n)
end

local function corrupt(what)
  error('TOLLGATE_CORRUPT ' .. what)
end

-- A stored non-negative integer, or nil when absent.
local function int(value, name)
  if not value then
    return nil
  end
  local n = tonumber(value)
  if not n or n < 0 or n ~= math.floor(n) or n >= 9007199254740992 then
    corrupt('field ' .. name .. ' holds ' .. tostring(value))
  end
  return n
end

-- A key holding another type makes Redis answer WRONGTYPE, which the store reports as a
-- corrupt value.
local STATE = KEYS[1]

local NOW
if ARGV[1] ~= '' then
  NOW = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
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
