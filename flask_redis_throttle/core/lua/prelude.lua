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
local find, fmod, gmatch = string.find, math.fmod, string.gmatch

-- The deciding layer (see decide.lua) and whether every layer so far fits.
local admitted = true
local pick, pick_remaining, pick_reset, pick_retry = 0, 0, 0, -1

-- The reply (see main.lua).
local function reply()
  return {admitted and 1 or 0, pick, pick_remaining, math.ceil(pick_reset), math.ceil(pick_retry), now}
end
