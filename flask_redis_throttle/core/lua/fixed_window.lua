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

local strategy = {}

function strategy.load(key)
  return packed.load(key, '(%d+):(%d+)')
end

-- Check each layer of `entry`, numbering them on from i.
function strategy.check(state, entry, i)
  for quota, name in gmatch(entry, '(%d+)/(%d+)') do
    i = i + 1
    quota = tonumber(quota)
    local period = name * 1000000
    quotas[i], periods[i] = quota, period
    local elapsed = fmod(now, period)
    local window = (now - elapsed) / period
    local reset = period - elapsed
    -- The record's window, as read, is written back as it is: one number
    -- less to format.
    local counted, count = fields(state, name)
    local used = 0
    if tonumber(counted) == window then
      used, window = tonumber(count), counted
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
  for _, name in gmatch(entry, '(%d+)/(%d+)') do
    local period = name * 1000000
    local elapsed = fmod(now, period)
    local window = (now - elapsed) / period
    local counted, count = fields(state, name)
    local used = tonumber(counted) == window and tonumber(count) or 0
    if used > 0 and packed.first_refund(state, name) then
      note(state, name, name .. '=' .. counted .. ':' .. math.max(used - given, 0), period - elapsed)
    end
  end
end

local function life(window, count, period)
  return (tonumber(window) + 1) * period - now
end

function strategy.store(state)
  packed.store(state, life)
end
