-- tollgate common helpers: concatenated in front of every script (see src/scripts.rs).
--
-- Numbers are Lua doubles: exact for integers below 2^53. The core's bounds keep every value and
-- product below that, and idiv is exact there (the rounding error of a / b is smaller than the
-- distance from a / b to the next integer whenever a < 2^53).

-- The core's bounds on a charge's debt (see tollgate::bounds): the largest count of a window or
-- log (MAX_COUNT, 2^50), and the longest a bucket's or GCRA's debt may take to pay back
-- (MAX_DEBT_PERIOD, 1000 days in µs).
local MAX_COUNT = 1125899906842624
local MAX_DEBT_US = 86400000000000

local function idiv(a, b)
  -- a % b is floor division's remainder, computed by the VM: cheaper than a call to math.floor.
  return (a - a % b) / b
end

-- An integer as Redis should store it: all digits, no exponent (%d is exact below 2^53, where
-- every value stays, and cheaper than %.0f).
local function num(n)
  return string.format('%d', n)
end

local function corrupt(what)
  -- A table error keeps our code first in the reply, where clients read the error code.
  error({ err = 'TOLLGATE_CORRUPT ' .. what })
end

-- A stored non-negative integer, or nil when absent.
local function int(value, name)
  if not value then
    return nil
  end
  local n = tonumber(value)
  if not n or n < 0 or n % 1 ~= 0 or n >= 9007199254740992 then
    corrupt('field ' .. name .. ' holds ' .. tostring(value))
  end
  return n
end

-- Now in µs since the Unix epoch: the caller's (tests pass one) or Redis's own clock.
local function now_us(given)
  if given ~= '' then
    return tonumber(given)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
