-- Fixed window: one counter per clock-aligned window (the fixed-window
-- article). A layer's record holds, after its window, the window number,
-- floor(now / window), in 6 bytes, and the count in 4 (a quota is at most
-- 10^9). Keeping the window in the record, rather than trusting a key to
-- expire on the exact microsecond, means a count can never leak into the
-- next window.
--
-- Promise: at most `quota` admitted per window; up to twice that across a
-- window boundary. Memory: one packed string per identity and scope (see
-- records.lua).
--
-- Timestamps in microseconds have 16 digits, too many for now / period to
-- be exact in a double near the end of a window. fmod is exact, and so is
-- everything computed from it here.

local RECORD = '<I4I6I4'
local unpack_bytes, pack_bytes, fmod = struct.unpack, struct.pack, math.fmod

return {
  size = 14,

  check = function(now, cost, quota, name, _, value, p)
    local period = name * 1000000
    local elapsed = fmod(now, period)
    local window = (now - elapsed) / period
    local reset = period - elapsed
    local used = 0
    if p then
      local _, counted, count = unpack_bytes(RECORD, value, p)
      if counted == window then
        used = count
      end
    end
    -- A layer with nothing counted has its full quota now: its reset is 0.
    if used + cost > quota then
      return false, quota - used, used > 0 and reset or 0, reset
    end
    if cost > 0 then
      return true, quota - used - cost, reset, 0, pack_bytes(RECORD, name, window, used + cost), reset
    end
    return true, quota - used, used > 0 and reset or 0, 0
  end,

  -- Only the window the request was counted in: a count can never be given
  -- back to a later window.
  refund = function(now, given, _, name, _, value, p)
    if p then
      local period = name * 1000000
      local elapsed = fmod(now, period)
      local window = (now - elapsed) / period
      local _, counted, count = unpack_bytes(RECORD, value, p)
      if counted == window and count > 0 then
        return pack_bytes(RECORD, name, window, math.max(count - given, 0)), period - elapsed
      end
    end
  end,

  life = function(now, value, p, period)
    local _, window = unpack_bytes(RECORD, value, p)
    return (window + 1) * period - now
  end,
}
