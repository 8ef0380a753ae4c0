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
-- (see packed.lua).

local strategy = {}
local RECORD, SIZE = '<I4I8I4', 16

function strategy.load(key)
  return packed.load(key, RECORD, SIZE)
end

-- Check each layer of the entry, numbering them on from i.
function strategy.check(state, plan, first_layer, last_layer, i)
  for at = first_layer, last_layer, 8 do
    local quota, name = unpack_bytes('<I4I4', plan, at)
    i = i + 1
    local period = name * 1000000
    quotas[i], periods[i] = quota, period
    -- The TAT as (at, part), never before now.
    local at, part = now, 0
    local a, p = fields(state, name)
    if a then
      if a > now or (a == now and p > 0) then
        at, part = a, p
        if part >= quota then -- the quota was lowered since: round up
          at, part = at + 1, 0
        end
      end
    end
    -- The TAT after this request (T = step + share / quota), and how far
    -- ahead of now it is, rounded up.
    local share = fmod(period, quota)
    local step = (period - share) / quota
    local extra = part + cost * share
    local next_part = fmod(extra, quota)
    local next_at = at + cost * step + (extra - next_part) / quota
    local ahead = next_at - now + (next_part > 0 and 1 or 0)
    if ahead <= period then
      fits[i], resets[i], retries[i] = true, ahead, 0
      remaining[i] = math.floor(((period - (next_at - now)) * quota - next_part) / period)
      if cost > 0 then
        note(state, name, pack_bytes(RECORD, name, next_at, next_part), ahead)
      end
    else
      fits[i], retries[i] = false, ahead - period
      remaining[i] = math.max(math.floor(((period - (at - now)) * quota - part) / period), 0)
      resets[i] = at - now + (part > 0 and 1 or 0)
    end
  end
  return i
end

function strategy.refund(state, plan, first_layer, last_layer, given)
  -- Move the TAT back by given * T, borrowing whole microseconds when the
  -- remainder would go below zero. A TAT that ends up at or before `now`
  -- means no debt at all, which check() already reads that way.
  for at = first_layer, last_layer, 8 do
    local quota, name = unpack_bytes('<I4I4', plan, at)
    local a, p = fields(state, name)
    if a and packed.first_refund(state, name) then
      local period = name * 1000000
      local share = fmod(period, quota)
      local step = (period - share) / quota
      local part = p - given * share
      local borrow = part < 0 and math.ceil(-part / quota) or 0
      local tat = a - given * step - borrow
      note(state, name, pack_bytes(RECORD, name, tat, part + borrow * quota), tat - now + 1)
    end
  end
end

local function life(value, p)
  local _, at, part = unpack_bytes(RECORD, value, p)
  return at - now + (part > 0 and 1 or 0)
end

function strategy.store(state)
  packed.store(state, life)
end
