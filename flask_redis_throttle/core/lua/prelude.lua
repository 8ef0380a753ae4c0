-- The request, read first: the strategies' files and main.lua share it.
--
-- now      the time to decide at, in microseconds since the epoch: ARGV[1],
--          or Redis TIME when ARGV[1] is "" (production always sends "";
--          tests pin time)
-- cost     ARGV[2]
--
-- Every layer of the request is numbered in the plan's order, from 1. A
-- strategy's check() fills these for each layer it checks:
-- quotas[i], periods[i] (microseconds), and its verdict: fits[i],
-- remaining[i], resets[i], retries[i].

local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local cost = tonumber(ARGV[2])
-- What every request calls, kept in locals: a global is a table lookup.
local fmod, gmatch, tonumber = math.fmod, string.gmatch, tonumber
-- (Made with room for 8 layers: growing them one by one costs more.)
local quotas, periods = {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}
local fits, remaining = {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}
local resets, retries = {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}
local strategies = {}
