-- Fixed window: one counter per clock-aligned window (seeds 000, 003, 004).
--
-- A counter is a string "<window number>:<count>", where the window number
-- is floor(now / window). Keeping the window in the value, rather than
-- trusting the key to expire on the exact microsecond, means a count can
-- never leak into the next window. So the key can safely live one second
-- past its window's end; that slack means a key is never gone early when
-- the time a script decides at is a moment behind Redis's expiry clock, as
-- it is when tests pin the time.
--
-- Promise: at most `quota` admitted per window; up to twice that across a
-- window boundary. Memory: one short string per identity and layer.

local function check(key, quota, period, now, cost)
  -- Timestamps in microseconds have 16 digits, too many for now / period to
  -- be exact in a double near the end of a window. fmod is exact, and so is
  -- everything computed from it here.
  local elapsed = math.fmod(now, period)
  local window = (now - elapsed) / period
  local reset = period - elapsed
  local used = 0
  local value = redis.call('GET', key)
  if value then
    local stored, count = string.match(value, '^(%d+):(%d+)$')
    if tonumber(stored) == window then
      used = tonumber(count)
    end
  end
  if used + cost <= quota then
    return true, quota - used - cost, reset, 0, {window, used + cost, reset}
  end
  return false, quota - used, reset, reset, nil
end

local function record(key, state)
  local window, count, reset = state[1], state[2], state[3]
  redis.call('SET', key, string.format('%d:%d', window, count), 'PX', math.ceil(reset / 1000) + 1000)
end

local function refund(key, quota, period, now, cost)
  -- Only the window the request was counted in: a count can never be given
  -- back to a later window.
  local elapsed = math.fmod(now, period)
  local window = (now - elapsed) / period
  local value = redis.call('GET', key)
  if not value then
    return
  end
  local stored, count = string.match(value, '^(%d+):(%d+)$')
  if tonumber(stored) == window then
    local left = math.max(tonumber(count) - cost, 0)
    redis.call('SET', key, string.format('%d:%d', window, left), 'PX', math.ceil((period - elapsed) / 1000) + 1000)
  end
end
