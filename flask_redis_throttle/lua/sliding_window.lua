-- Sliding window: each window is cut into BUCKETS sub-buckets, and a request
-- is counted against the current sub-bucket and the BUCKETS before it (the
-- sliding-window article keeps one counter per second in the same way).
--
-- Those BUCKETS + 1 sub-buckets always cover the last window's length, and a
-- little more: the oldest of them may hold requests from up to one sub-bucket
-- before the window began. Counting them anyway is what makes the promise
-- hold. Promise: never more than `quota` admitted in any span of the window's
-- length; a refusal may come early by at most one sub-bucket (a tenth of the
-- window).
--
-- A layer's record is "<newest sub-bucket>:<count>,<count>,...", the counts
-- of the newest sub-bucket and of each one before it, trailing zeros left
-- out. Memory: one packed string per identity and scope (see packed.lua).

local BUCKETS = 10

local strategy = {load = packed.load}

-- The sub-buckets in `record` as {number, count} pairs, newest first.
local function buckets(record)
  local found = {}
  if record then
    local newest, counts = string.match(record, '^(%d+):([%d,]+)$')
    if newest then
      local number = tonumber(newest)
      for count in string.gmatch(counts, '%d+') do
        found[#found + 1] = {number, tonumber(count)}
        number = number - 1
      end
    end
  end
  return found
end

local function encode(counts, newest, oldest)
  local parts, last = {}, 0
  for number = newest, oldest, -1 do
    local count = counts[number] or 0
    parts[#parts + 1] = string.format('%.0f', count)
    if count > 0 then
      last = #parts
    end
  end
  if last == 0 then
    return nil
  end
  return string.format('%.0f:', newest) .. table.concat(parts, ',', 1, last)
end

-- The sub-bucket `now` is in, with the sub-bucket width; the window is whole
-- seconds, so a sub-bucket is whole microseconds.
local function current_of(period, now)
  local width = period / BUCKETS
  return (now - math.fmod(now, width)) / width, width
end

function strategy.check(state, name, quota, period, now, cost)
  local current, width = current_of(period, now)
  local oldest = current - BUCKETS
  local used, newest = 0, nil
  local counted = {}
  for _, entry in ipairs(buckets(state.old[name])) do
    -- Sub-buckets after the current one only exist if the clock went back;
    -- counting them too keeps the promise.
    if entry[1] >= oldest and entry[2] > 0 then
      used = used + entry[2]
      counted[#counted + 1] = entry
      if not newest or entry[1] > newest then
        newest = entry[1]
      end
    end
  end
  -- Sub-bucket b is counted until sub-bucket b + BUCKETS + 1 begins.
  local function until_gone(bucket)
    return (bucket + BUCKETS + 1) * width - now
  end
  if used + cost <= quota then
    return true, quota - used - cost, until_gone(newest and math.max(newest, current) or current), 0
  end
  -- Find the first sub-bucket boundary at which enough has aged out (the
  -- oldest first; a request costing more than the quota never fits, which
  -- main.lua handles).
  local retry, left = 0, used
  for j = #counted, 1, -1 do
    left = left - counted[j][2]
    if left + cost <= quota then
      retry = until_gone(counted[j][1])
      break
    end
  end
  return false, math.max(quota - used, 0), newest and until_gone(newest) or 0, retry
end

function strategy.commit(state, name, quota, period, now, cost)
  local current = current_of(period, now)
  local counts, newest = {}, current
  for _, entry in ipairs(buckets(state.old[name])) do
    counts[entry[1]] = entry[2]
    newest = math.max(newest, entry[1])
  end
  counts[current] = (counts[current] or 0) + cost
  packed.put(state, name, encode(counts, newest, current - BUCKETS))
end

function strategy.refund(state, name, quota, period, now, cost)
  -- Take it out of the sub-bucket it went into, if that is still kept.
  local current = current_of(period, now)
  local found = buckets(packed.get(state, name))
  local counts = {}
  for _, entry in ipairs(found) do
    counts[entry[1]] = entry[2]
  end
  if counts[current] then
    counts[current] = math.max(counts[current] - cost, 0)
    -- With nothing left, a record that is dropped when the key is stored.
    packed.put(state, name, encode(counts, found[1][1], found[#found][1]) or '0:0')
  end
end

local function life(record, period, now)
  local newest = tonumber(string.match(record, '^(%d+):'))
  return newest and (newest + BUCKETS + 1) * (period / BUCKETS) - now or 0
end

function strategy.store(state, now)
  packed.store(state, now, life)
end
