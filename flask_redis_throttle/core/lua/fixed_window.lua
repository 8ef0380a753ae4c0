-- Fixed window: one counter per clock-aligned window (the fixed-window
-- article). A layer's record holds, after its window, the window number,
-- floor(now / window), in 6 bytes, and the count in 4 (a quota is at most
-- 10^9). Keeping the window in the record, rather
-- than trusting a key to expire on the exact microsecond, means a count can
-- never leak into the next window.
--
-- Promise: at most `quota` admitted per window; up to twice that across a
-- window boundary. Memory: one packed string per identity and scope (see
-- packed.lua).
--
-- Timestamps in microseconds have 16 digits, too many for now / period to
-- be exact in a double near the end of a window. fmod is exact, and so is
-- everything computed from it here.

local strategy = {}
local RECORD, SIZE = '<I4I6I4', 14

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
    local elapsed = fmod(now, period)
    local window = (now - elapsed) / period
    local reset = period - elapsed
    local counted, count = fields(state, name)
    local used = counted == window and count or 0
    resets[i] = reset
    if used + cost <= quota then
      fits[i], remaining[i], retries[i] = true, quota - used - cost, 0
      if cost > 0 then
        note(state, name, pack_bytes(RECORD, name, window, used + cost), reset)
      end
    else
      fits[i], remaining[i], retries[i] = false, quota - used, reset
    end
  end
  return i
end

function strategy.refund(state, plan, first_layer, last_layer, given)
  -- Only the window the request was counted in: a count can never be given
  -- back to a later window.
  for at = first_layer + 4, last_layer + 4, 8 do
    local name = unpack_bytes('<I4', plan, at)
    local period = name * 1000000
    local elapsed = fmod(now, period)
    local window = (now - elapsed) / period
    local counted, count = fields(state, name)
    local used = counted == window and count or 0
    if used > 0 and packed.first_refund(state, name) then
      note(state, name, pack_bytes(RECORD, name, window, math.max(used - given, 0)), period - elapsed)
    end
  end
end

local function life(value, p, period)
  local _, window = unpack_bytes(RECORD, value, p)
  return (window + 1) * period - now
end

function strategy.store(state)
  packed.store(state, life)
end
