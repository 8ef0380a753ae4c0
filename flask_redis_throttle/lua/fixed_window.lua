-- Fixed window: one counter per clock-aligned window (the fixed-window
-- article). A layer's record is "<window number>:<count>", where the window
-- number is floor(now / window). Keeping the window in the record, rather
-- than trusting a key to expire on the exact microsecond, means a count can
-- never leak into the next window.
--
-- Promise: at most `quota` admitted per window; up to twice that across a
-- window boundary. Memory: one packed string per identity and scope (see
-- packed.lua).

local strategy = {load = packed.load}

-- The window `now` is in, and how long until it ends. Timestamps in
-- microseconds have 16 digits, too many for now / period to be exact in a
-- double near the end of a window. fmod is exact, and so is everything
-- computed from it here.
local function window_of(period, now)
  local elapsed = math.fmod(now, period)
  return (now - elapsed) / period, period - elapsed
end

-- What is used of the window `window` in `record`.
local function used_in(record, window)
  if record then
    local stored, count = string.match(record, '^(%d+):(%d+)$')
    if tonumber(stored) == window then
      return tonumber(count)
    end
  end
  return 0
end

function strategy.check(state, name, quota, period, now, cost)
  local window, reset = window_of(period, now)
  local used = used_in(state.old[name], window)
  if used + cost <= quota then
    return true, quota - used - cost, reset, 0
  end
  return false, quota - used, reset, reset
end

function strategy.commit(state, name, quota, period, now, cost)
  local window = window_of(period, now)
  packed.put(state, name, string.format('%.0f:%.0f', window, used_in(state.old[name], window) + cost))
end

function strategy.refund(state, name, quota, period, now, cost)
  -- Only the window the request was counted in: a count can never be given
  -- back to a later window.
  local window = window_of(period, now)
  local used = used_in(packed.get(state, name), window)
  if used > 0 then
    packed.put(state, name, string.format('%.0f:%.0f', window, math.max(used - cost, 0)))
  end
end

local function life(record, period, now)
  local stored = tonumber(string.match(record, '^(%d+):'))
  return stored and (stored + 1) * period - now or 0
end

function strategy.store(state, now)
  packed.store(state, now, life)
end
