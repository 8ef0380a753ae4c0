-- GCRA, the generic cell rate algorithm (seed 001). For `quota` per `period`
-- a request is due every interval T = period / quota, and each counter keeps
-- one number: the theoretical arrival time (TAT) of the next request. A
-- request of cost c pushes it to max(TAT, now) + c * T, and fits if that is
-- at most one period ahead of now. So a fresh client may burst `quota`
-- requests, then one every T; it never waits for a window to end. This is
-- the same as a token bucket of `quota` tokens refilled one every T.
--
-- T is rarely a whole number of microseconds (1e6 / 3), so the TAT is kept
-- exactly as "<microseconds>:<remainder>", meaning microseconds plus
-- remainder / quota. Every decision and every retry time is then exact
-- integer arithmetic (for a cost of 1 always; for larger costs while
-- cost * quota stays below 2^53).
--
-- Promise: a burst of at most `quota`, then at most one request per T.
-- Retry-After is exact. Memory: one short string per identity and layer.

local function check(key, quota, period, now, cost)
  local share = math.fmod(period, quota)
  local step = (period - share) / quota -- T = step + share / quota
  local at, part = now, 0 -- the TAT is at + part / quota; never before now
  local value = redis.call('GET', key)
  if value then
    local a, p = string.match(value, '^(%d+):(%d+)$')
    a, p = tonumber(a), tonumber(p)
    if a and (a > now or (a == now and p > 0)) then
      at, part = a, p
      if part >= quota then -- the quota was lowered since: round up
        at, part = at + 1, 0
      end
    end
  end
  -- The TAT after this request, and how far ahead of now it is, rounded up.
  local extra = part + cost * share
  local next_part = math.fmod(extra, quota)
  local next_at = at + cost * step + (extra - next_part) / quota
  local ahead = next_at - now + (next_part > 0 and 1 or 0)
  if ahead <= period then
    local remaining = math.floor(((period - (next_at - now)) * quota - next_part) / period)
    return true, remaining, ahead, 0, {next_at, next_part, ahead}
  end
  local remaining = math.floor(((period - (at - now)) * quota - part) / period)
  local reset = at - now + (part > 0 and 1 or 0)
  return false, math.max(remaining, 0), reset, ahead - period, nil
end

local function record(key, state)
  local next_at, next_part, ahead = state[1], state[2], state[3]
  redis.call('SET', key, string.format('%.0f:%.0f', next_at, next_part), 'PX', math.ceil(ahead / 1000) + 1000)
end

local function refund(key, quota, period, now, cost)
  -- Move the TAT back by cost * T, borrowing whole microseconds when the
  -- remainder would go below zero. A TAT that ends up at or before `now`
  -- means no debt at all, which check() already reads that way.
  local value = redis.call('GET', key)
  if not value then
    return
  end
  local a, p = string.match(value, '^(%d+):(%d+)$')
  a, p = tonumber(a), tonumber(p)
  if not a then
    return
  end
  local share = math.fmod(period, quota)
  local step = (period - share) / quota
  local part = p - cost * share
  local borrow = part < 0 and math.ceil(-part / quota) or 0
  local at = a - cost * step - borrow
  part = part + borrow * quota
  local ahead = at - now + (part > 0 and 1 or 0)
  if ahead <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, string.format('%.0f:%.0f', at, part), 'PX', math.ceil(ahead / 1000) + 1000)
  end
end
