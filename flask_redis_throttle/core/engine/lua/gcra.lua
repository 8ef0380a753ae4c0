-- GCRA, the generic cell rate algorithm (the GCRA article). For `quota` per
-- `period` a request is due every interval T = period / quota, and each
-- layer keeps one number: the theoretical arrival time (TAT) of the next
-- request. A request of cost c pushes it to max(TAT, now) + c * T, and fits
-- if that is at most one period ahead of now. So a fresh client may burst
-- `quota` requests, then one every T; it never waits for a window to end.
-- This is the same as a token bucket of `quota` tokens refilled one every T.
--
-- T is rarely a whole number of microseconds (1e6 / 3), so a layer's record
-- keeps the TAT exactly as microseconds (8 bytes, after the window) plus a
-- remainder (4 bytes) meaning remainder / quota of a microsecond; the
-- remainder is 0 whenever the quota divides the window. Every decision and
-- every retry time is then exact integer arithmetic (for a cost of 1
-- always; for larger costs while cost * quota stays below 2^53).
--
-- Promise: a burst of at most `quota`, then at most one request per T.
-- Retry-After is exact. Memory: one packed string per identity and scope
-- (see records.lua).
--
-- A shaped limit (see shaping.lua) may give a smaller `burst`: a request
-- then fits if the TAT after it is at most burst * T ahead of now, rather
-- than a period; with a burst of 1, requests are spread one every T, never
-- more than `quota` in any span of a period. The reach burst * T is kept
-- exact as (reach, reach_part), like the TAT.

local RECORD = '<I4I8I4'
local unpack_bytes, pack_bytes, fmod, floor = struct.unpack, struct.pack, math.fmod, math.floor

return {
  size = 16,

  check = function(now, cost, quota, name, _, value, p, burst)
    local period = name * 1000000
    -- The TAT as (tat, part), never before now.
    local tat, part = now, 0
    if p then
      local _, a, b = unpack_bytes(RECORD, value, p)
      if a > now or (a == now and b > 0) then
        tat, part = a, b
        if part >= quota then -- the quota was lowered since: round up
          tat, part = tat + 1, 0
        end
      end
    end
    -- The TAT after this request (T = step + share / quota), and how far
    -- ahead of now it is, rounded up.
    local share = fmod(period, quota)
    local step = (period - share) / quota
    local extra = part + cost * share
    local next_part = fmod(extra, quota)
    local next_at = tat + cost * step + (extra - next_part) / quota
    local ahead = next_at - now + (next_part > 0 and 1 or 0)
    -- How far ahead of now the TAT may be: a period, or burst * T.
    local reach, reach_part = period, 0
    if burst and burst > 0 and burst < quota then
      local spread = burst * share
      reach_part = fmod(spread, quota)
      reach = burst * step + (spread - reach_part) / quota
    end
    local over = next_at - now - reach
    if over > 0 or (over == 0 and next_part > reach_part) then
      local left = math.max(floor(((reach - (tat - now)) * quota + reach_part - part) / period), 0)
      return false, left, tat - now + (part > 0 and 1 or 0), over + (next_part > reach_part and 1 or 0)
    end
    local left = floor(((reach - (next_at - now)) * quota + reach_part - next_part) / period)
    if cost > 0 then
      return true, left, ahead, 0, pack_bytes(RECORD, name, next_at, next_part), ahead
    end
    return true, left, ahead, 0
  end,

  -- Move the TAT back by given * T, borrowing whole microseconds when the
  -- remainder would go below zero. A TAT that ends up at or before `now`
  -- means no debt at all, which check() already reads that way. A turn
  -- `kept` free for the next request (see shaping.lua) leaves it as it is.
  refund = function(now, given, quota, name, _, value, p, _, kept)
    if p and not kept then
      local _, a, b = unpack_bytes(RECORD, value, p)
      local period = name * 1000000
      local share = fmod(period, quota)
      local step = (period - share) / quota
      local part = b - given * share
      local borrow = part < 0 and math.ceil(-part / quota) or 0
      local tat = a - given * step - borrow
      return pack_bytes(RECORD, name, tat, part + borrow * quota), tat - now + 1
    end
  end,

  life = function(now, value, p)
    local _, tat, part = unpack_bytes(RECORD, value, p)
    return tat - now + (part > 0 and 1 or 0)
  end,
}
