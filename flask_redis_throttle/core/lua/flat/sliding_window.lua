-- Sliding window, flat: the whole request in one pass, for the usual
-- request (see scripts.py for when it runs): every limit uses the sliding
-- window, none has a penalty, no two of its keys are the same, and it
-- counts or inspects (a cost of 0 or more). prelude.lua and records.lua
-- come first. It takes the arguments and gives the reply of main.lua,
-- decides exactly as sliding_window.lua does there (which explains the
-- sub-buckets), and reads and writes the same packed records, so the two
-- can take turns on one key; tests/test_flat.py holds them to that. It
-- builds no table per key, and formats as few numbers as it can: most of a
-- record is written back as it was read.

local BUCKETS = 10
-- The record's patterns, as packed.lua's patterns() makes them.
local ANCHORED, NAMED, WHOLE = '^(%d+)=(%d+):([%d,]+) ?', '=(%d+):([%d,]+)', '^(%d+):([%d,]+)'
local concat, max, min = table.concat, math.max, math.min

-- The value each key gets if the request is admitted, and its life.
local values, lives, parts = {}, {}, {}
local writes = cost > 0
-- A record's counts, newest first, and where each ends in its text (made
-- with room for all of them: growing them one by one costs more).
local counts, ends = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

-- Read the counts of a record's list ("<count>,<count>,...") into `counts`
-- and `ends`, digit by digit: one call for all its characters, where a
-- pattern match and a conversion per count cost ten times as much. Returns
-- how many there are.
local function parse(list)
  local chars, size, count = {string.byte(list, 1, -1)}, 1, 0
  for k = 1, #chars do
    local char = chars[k]
    if char == 44 then -- ','
      counts[size], ends[size] = count, k - 1
      size, count = size + 1, 0
    else
      count = count * 10 + char - 48
    end
  end
  counts[size], ends[size] = count, #chars
  return size
end

-- The new list of a layer that counts this request: from sub-bucket
-- `current` down to the oldest still kept, trailing zeros left out. The
-- record read (`first`, its `size` counts, its `text`) is reused as text,
-- so only the current sub-bucket's count is written out anew.
local function counted(first, size, text, current, oldest)
  if not first or first > current then
    -- No record, or one from a clock that went back: count by number.
    local list, length, last = {}, 0, 0
    for number = max(first or current, current), max(oldest, min(current, first and first - size + 1 or current)), -1 do
      local k = first and first - number + 1
      local count = (k and k >= 1 and k <= size) and counts[k] or 0
      if number == current then
        count = count + cost
      end
      length = length + 1
      list[length] = count
      if count > 0 then
        last = length
      end
    end
    return concat(list, ',', 1, last)
  end
  -- Sub-buckets first down to first - keep + 1 are still in the window;
  -- the current one's count, if the record has it, goes to the head.
  local keep, skip = min(size, first - oldest + 1), first == current and 1 or 0
  while keep > skip and counts[keep] == 0 do
    keep = keep - 1
  end
  local head = (skip == 1 and counts[1] or 0) + cost
  -- (A digit is one character: no number to format.)
  head = head < 10 and string.char(48 + head) or tostring(head)
  if keep <= skip then
    return head
  end
  local tail = string.sub(text, skip == 1 and ends[1] + 2 or 1, ends[keep])
  return head .. string.rep(',0', current - first - 1 + skip) .. ',' .. tail
end

local layer, e = 0, 0
for entry in gmatch(ARGV[3], '%S+') do
  e = e + 1
  local value = redis.call('GET', KEYS[e]) or ''
  local n, longest, at = 0, 0, 1
  for quota, name in gmatch(entry, '(%d+)/(%d+)') do
    layer = layer + 1
    quota = quota + 0
    local period = name * 1000000
    local width = period / BUCKETS
    local current = (now - fmod(now, width)) / width
    local oldest = current - BUCKETS
    -- The record: `first` is its newest sub-bucket's number, nil for none.
    local first, size, top, text = nil, 0, nil, nil
    top, text, at = read(value, at, name, ANCHORED, NAMED)
    if top then
      first, size = top + 0, parse(text)
    end
    local used, newest = 0, nil
    for k = 1, size do
      local number, count = first - k + 1, counts[k]
      if number >= oldest and count > 0 then
        used = used + count
        newest = newest or number
      end
    end
    local fit, left, reset, retry = used + cost <= quota, 0, 0, 0
    if fit then
      left = quota - used - cost
      reset = (max(newest or current, current) + BUCKETS + 1) * width - now
    else
      local rest = used
      for number = oldest, first or oldest - 1 do
        local count = counts[first - number + 1]
        count = first - number + 1 <= size and count or 0
        rest = rest - count
        if count > 0 and rest + cost <= quota then
          retry = (number + BUCKETS + 1) * width - now
          break
        end
      end
      left = max(quota - used, 0)
      reset = newest and (newest + BUCKETS + 1) * width - now or 0
    end
    if cost > quota then
      fit, retry = false, period
    end
    -- include: decide.lua
    if admitted and writes then
      -- The newest sub-bucket: the record's, as read, if it is current.
      local newest = max(first or current, current)
      n = n + 1
      parts[n] = name .. '=' .. (newest == first and top or newest) .. ':' .. counted(first, size, text, current, oldest)
      local expires = (newest + BUCKETS + 1) * width - now
      if expires > longest then
        longest = expires
      end
    end
  end
  if admitted and writes then
    if at <= #value then
      -- Records other limits that share the scope wrote: kept while their
      -- newest sub-bucket is in their window (as in sliding_window.lua).
      local function life(newest, list, period)
        return (newest + BUCKETS + 1) * (period / BUCKETS) - now
      end
      n, longest = keep(value, WHOLE, life, written(entry), parts, n, longest)
    end
    values[e], lives[e] = concat(parts, ' ', 1, n), longest
  end
end

if admitted and writes then
  for k = 1, e do
    set(KEYS[k], values[k], lives[k])
  end
end
return reply()
