-- GCRA, the generic cell rate algorithm (the GCRA article). For `quota` per
-- `period` a request is due every interval T = period / quota, and each
-- layer keeps one number: the theoretical arrival time (TAT) of the next
-- request. A request of cost c pushes it to max(TAT, now) + c * T, and fits
-- if that is at most one period ahead of now. So a fresh client may burst
-- `quota` requests, then one every T; it never waits for a window to end.
-- This is the same as a token bucket of `quota` tokens refilled one every T.
--
-- T is rarely a whole number of microseconds (1e6 / 3), so a layer's record
-- keeps the TAT exactly as "<microseconds>:<remainder>", meaning microseconds
-- plus remainder / quota; just "<microseconds>" when the remainder is 0, as
-- it always is when the quota divides the window. The microseconds are
-- written in base 36, 11 characters rather than 16 digits. Every decision and every retry time is then exact
-- integer arithmetic (for a cost of 1 always; for larger costs while
-- cost * quota stays below 2^53).
--
-- Promise: a burst of at most `quota`, then at most one request per T.
-- Retry-After is exact. Memory: one packed string per identity and scope
-- (see packed.lua).

local strategy = {load = packed.load}

-- The TAT in `record` as (at, part).
local function read(record)
  local a, p = string.match(record or '', '^(%w+):?(%d*)$')
  return tonumber(a or '', 36), tonumber(p) or 0
end

local DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'

local function write(at, part)
  -- Exact: every integer below 2^53 is, and so is each step here.
  local digits = ''
  repeat
    local digit = math.fmod(at, 36)
    digits = string.sub(DIGITS, digit + 1, digit + 1) .. digits
    at = (at - digit) / 36
  until at == 0
  if part > 0 then
    return digits .. string.format(':%.0f', part)
  end
  return digits
end

-- The TAT in `record` as (at, part), never before now.
local function tat(record, quota, now)
  if record then
    local a, p = read(record)
    if a and (a > now or (a == now and p > 0)) then
      if p >= quota then -- the quota was lowered since: round up
        return a + 1, 0
      end
      return a, p
    end
  end
  return now, 0
end

-- The TAT after a request of `cost`, and how far ahead of now it is, rounded up.
local function pushed(at, part, quota, period, now, cost)
  local share = math.fmod(period, quota)
  local step = (period - share) / quota -- T = step + share / quota
  local extra = part + cost * share
  local next_part = math.fmod(extra, quota)
  local next_at = at + cost * step + (extra - next_part) / quota
  return next_at, next_part, next_at - now + (next_part > 0 and 1 or 0)
end

function strategy.check(state, name, quota, period, now, cost)
  local at, part = tat(state.old[name], quota, now)
  local next_at, next_part, ahead = pushed(at, part, quota, period, now, cost)
  if ahead <= period then
    local remaining = math.floor(((period - (next_at - now)) * quota - next_part) / period)
    return true, remaining, ahead, 0
  end
  local remaining = math.floor(((period - (at - now)) * quota - part) / period)
  local reset = at - now + (part > 0 and 1 or 0)
  return false, math.max(remaining, 0), reset, ahead - period
end

function strategy.commit(state, name, quota, period, now, cost)
  local at, part = tat(state.old[name], quota, now)
  local next_at, next_part = pushed(at, part, quota, period, now, cost)
  packed.put(state, name, write(next_at, next_part))
end

function strategy.refund(state, name, quota, period, now, cost)
  -- Move the TAT back by cost * T, borrowing whole microseconds when the
  -- remainder would go below zero. A TAT that ends up at or before `now`
  -- means no debt at all, which check() already reads that way, and the
  -- record is dropped when the key is stored.
  local a, p = read(packed.get(state, name))
  if not a then
    return
  end
  local share = math.fmod(period, quota)
  local step = (period - share) / quota
  local part = p - cost * share
  local borrow = part < 0 and math.ceil(-part / quota) or 0
  packed.put(state, name, write(a - cost * step - borrow, part + borrow * quota))
end

local function life(record, period, now)
  local a, p = read(record)
  return a and a - now + (p > 0 and 1 or 0) or 0
end

function strategy.store(state, now)
  packed.store(state, now, life)
end
