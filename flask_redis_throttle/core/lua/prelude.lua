-- What every script starts with, the general one (see main.lua) and the
-- flat ones (see flat/): the clock, the cost, and the choice of the layer
-- that decides the request.
--
-- now      the time to decide at, in microseconds since the epoch: ARGV[1],
--          or Redis TIME when ARGV[1] is "" (production always sends "";
--          tests pin time)
-- cost     ARGV[2]

local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = time[1] * 1000000 + time[2]
end
-- (Arithmetic reads a number from text once; tonumber() reads it twice.)
local cost = ARGV[2] + 0
-- What every request calls, kept in locals: a global is a table lookup.
local byte, find, fmod, gmatch = string.byte, string.find, math.fmod, string.gmatch
local unpack_bytes = struct.unpack

-- The plan (ARGV[3]) is binary, its entries one after the other (see
-- main.lua). The entry that starts at `at`: where its first and its last
-- layer are (each the quota and the window in seconds, '<I4I4'), where its
-- penalty is (nil for none), and where the next entry starts.
local function entry_at(plan, at)
  local first = at + 3
  local flag = first + 8 * byte(plan, at + 2)
  if byte(plan, flag) == 1 then
    return first, flag - 8, flag + 1, flag + 13
  end
  return first, flag - 8, nil, flag + 1
end

-- The deciding layer (see decide.lua) and whether every layer so far fits.
local admitted = true
local pick, pick_remaining, pick_reset, pick_retry = 0, 0, 0, -1

-- The reply (see main.lua).
local function reply()
  return {admitted and 1 or 0, pick, pick_remaining, math.ceil(pick_reset), math.ceil(pick_retry), now}
end
