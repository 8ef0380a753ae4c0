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

local strategy = {}

function strategy.load(key)
  return packed.load(key, '(%d+):([%d,]+)')
end

-- The counts of a record ("<newest>", "<count>,<count>,..."), newest first,
-- and the number of its newest sub-bucket; none for no record.
local function counts_of(newest, list)
  local counts = {}
  if newest then
    for count in gmatch(list, '%d+') do
      counts[#counts + 1] = tonumber(count)
    end
  end
  return counts, tonumber(newest)
end

-- Layer `name`'s part of the packed string: the counts of sub-buckets `top`
-- down to `bottom`, where `counts` holds those from `first` down, and
-- `extra` is added to sub-bucket `current`'s; trailing zeros are left out.
-- Nil when every count is 0.
local function part_of(name, top, bottom, counts, first, current, extra)
  local list, last = {}, 0
  -- Below the record's oldest sub-bucket (and the current one) all is 0.
  local low = math.max(bottom, math.min(current, first and first - #counts + 1 or current))
  for number = top, low, -1 do
    local count = first and counts[first - number + 1] or 0
    if number == current then
      count = count + extra
    end
    list[#list + 1] = count
    if count > 0 then
      last = #list
    end
  end
  if last > 0 then
    return name .. '=' .. top .. ':' .. table.concat(list, ',', 1, last)
  end
end

-- Check each layer of `entry`, numbering them on from i. The window is
-- whole seconds, so a sub-bucket is whole microseconds; sub-bucket numbers
-- stay below 10^14, which Lua writes exactly.
function strategy.check(state, entry, i)
  for quota, name in gmatch(entry, '(%d+)/(%d+)') do
    i = i + 1
    quota = tonumber(quota)
    local period = name * 1000000
    quotas[i], periods[i] = quota, period
    local width = period / BUCKETS
    local current = (now - fmod(now, width)) / width
    local oldest = current - BUCKETS
    local counts, first = counts_of(fields(state, name))
    -- Sub-buckets after the current one only exist if the clock went back;
    -- counting them too keeps the promise.
    local used, newest = 0, nil
    for k, count in ipairs(counts) do
      local number = first - k + 1
      if number >= oldest and count > 0 then
        used = used + count
        newest = newest or number
      end
    end
    -- Sub-bucket b is counted until sub-bucket b + BUCKETS + 1 begins.
    if used + cost <= quota then
      local top = math.max(first or current, current)
      local reset = (math.max(newest or current, current) + BUCKETS + 1) * width - now
      fits[i], remaining[i], resets[i], retries[i] = true, quota - used - cost, reset, 0
      if cost > 0 then
        local part = part_of(name, top, oldest, counts, first, current, cost)
        note(state, name, part, (top + BUCKETS + 1) * width - now)
      end
    else
      -- The first sub-bucket boundary at which enough has aged out, the
      -- oldest first (a request costing more than the quota never fits,
      -- which main.lua handles).
      local retry, left = 0, used
      for number = oldest, first or oldest - 1 do
        local count = counts[first - number + 1] or 0
        left = left - count
        if count > 0 and left + cost <= quota then
          retry = (number + BUCKETS + 1) * width - now
          break
        end
      end
      fits[i], remaining[i], retries[i] = false, math.max(quota - used, 0), retry
      resets[i] = newest and (newest + BUCKETS + 1) * width - now or 0
    end
  end
  return i
end

function strategy.refund(state, entry, given)
  -- Take it out of the sub-bucket it went into, if that is still kept.
  for _, name in gmatch(entry, '(%d+)/(%d+)') do
    local width = name * 1000000 / BUCKETS
    local current = (now - fmod(now, width)) / width
    local counts, first = counts_of(fields(state, name))
    local at = first and first - current + 1
    if at and counts[at] and packed.first_refund(state, name) then
      counts[at] = math.max(counts[at] - given, 0)
      local part = part_of(name, first, first - #counts + 1, counts, first, current, 0)
      -- With nothing left, a record that is dropped when the key is stored.
      note(state, name, part or name .. '=0:0', (first + BUCKETS + 1) * width - now)
    end
  end
end

local function life(newest, list, period)
  return (tonumber(newest) + BUCKETS + 1) * (period / BUCKETS) - now
end

function strategy.store(state)
  packed.store(state, life)
end
