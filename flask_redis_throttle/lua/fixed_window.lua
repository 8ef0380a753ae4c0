-- Fixed window: one counter per clock-aligned window (the fixed-window
-- article). A layer's record is "<window number>:<count>", where the window
-- number is floor(now / window). Keeping the window in the record, rather
-- than trusting a key to expire on the exact microsecond, means a count can
-- never leak into the next window.
--
-- Promise: at most `quota` admitted per window; up to twice that across a
-- window boundary. Memory: one packed string per identity and scope (see
-- packed.lua).
--
-- Timestamps in microseconds have 16 digits, too many for now / period to
-- be exact in a double near the end of a window. fmod is exact, and so is
-- everything computed from it here. Window numbers and counts stay far
-- below 10^14, which Lua writes exactly.

local strategy = {load = packed.load}

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

-- Check each layer of `entry`, numbering them on from i.
function strategy.check(state, entry, i)
  local old = state.old
  for quota, name in string.gmatch(entry, '(%d+)/(%d+)') do
    i = i + 1
    quota = tonumber(quota)
    local period = name * 1000000
    quotas[i], periods[i], names[i] = quota, period, name
    local elapsed = math.fmod(now, period)
    local window = (now - elapsed) / period
    local reset = period - elapsed
    local used = 0
    local record = old[name]
    if record then
      local stored, count = string.match(record, '^(%d+):(%d+)$')
      if tonumber(stored) == window then
        used = tonumber(count)
      end
    end
    resets[i] = reset
    if used + cost <= quota then
      fits[i], remaining[i], retries[i] = true, quota - used - cost, 0
      if cost > 0 then
        note(state, name, name .. '=' .. window .. ':' .. (used + cost), reset)
      end
    else
      fits[i], remaining[i], retries[i] = false, quota - used, reset
    end
  end
  return i
end

function strategy.refund(state, entry, given)
  -- Only the window the request was counted in: a count can never be given
  -- back to a later window.
  packed.refund(state, entry, function(record, quota, period, name)
    local elapsed = math.fmod(now, period)
    local window = (now - elapsed) / period
    local used = used_in(record, window)
    if used > 0 then
      note(state, name, name .. '=' .. window .. ':' .. math.max(used - given, 0), period - elapsed)
    end
  end)
end

local function life(record, period)
  local stored = tonumber(string.match(record, '^(%d+):'))
  return stored and (stored + 1) * period - now or 0
end

function strategy.store(state)
  packed.store(state, life)
end
