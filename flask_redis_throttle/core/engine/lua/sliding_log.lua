-- Sliding log: the time of every admitted request, in a sorted set (the
-- sliding-log article). A layer counts the entries in (now - window, now];
-- refused requests are never added.
--
-- Every layer of an identity under one scope counts in one sorted set, so a
-- request adds its entries once, however many layers it has. Entries older
-- than the longest window any limit has used on the set are removed
-- whenever one is added; that window is kept in the set itself, as the
-- member "w" with minus its length in seconds as its score, which no layer
-- counts (their ranges start after now - window, far above 0). Times are
-- written with '%d': whole microseconds, formatted as integers, which
-- costs a fraction of '%.0f' for the same text.
--
-- Promise: exact. Never more than `quota` admitted in any span of the
-- window's length, and a refusal only when that would be broken. Memory: an
-- entry per request in the longest window, so this suits small quotas.
--
-- Not packed: check() reads the set itself, and store() writes it, once per
-- key, given the longest window of the layers that counted the request.
--
-- Shaping (see shaping.lua): a request over the quota can wait until the
-- entry that blocks it leaves the window, check()'s retry. Its entries are
-- then stamped at the time it will run, now + wait: a reservation, an entry
-- in the future. Every read counts the entries up to +inf, so a reservation
-- is counted from the moment it is made until it leaves the window, by
-- every layer and every read (inspections, usage); the newest entry, which
-- gives the reset, may be one; and entries are only ever removed from the
-- past end. A request counted at time t (checked with the entries after
-- t - window, those in the future included) and stamped at t or later
-- keeps every window's count within the quota: any window that holds its
-- stamp begins after t - window, so every entry in it was counted. And a
-- request that fits at a time fits at every later one, since counts only
-- fall as time passes: so at now + wait every shaped layer fits.
--
-- A layer of a shaped entry (given a `burst`) returns the record 'r': the
-- key's entries are stamped now + wait if any layer that counts in it is
-- shaped, else now (main.lua joins the records of a key's entries).

local format, tonumber, max = string.format, tonumber, math.max

-- Add `count` entries stamped `stamped` (now, or a reserved turn after it)
-- to the sorted set `key`. First the entries older, at `now`, than the
-- longest window of any limit that counts in the set go; that window (the
-- member "w") is grown to `horizon` (microseconds) if it is shorter. The
-- set then lives as long as that window after the newest entry.
local function add(now, stamped, key, horizon, count)
  local stored = -(tonumber(redis.call('ZSCORE', key, 'w')) or 0) * 1000000
  horizon = max(horizon, stored)
  if horizon > stored then
    redis.call('ZADD', key, format('%d', -horizon / 1000000), 'w')
  end
  redis.call('ZREMRANGEBYSCORE', key, 0, format('%d', now - horizon))
  -- Members are unique: "<time>:<number>", numbered on from the entries
  -- already stamped with this time. Numbered from 1 first: a time is
  -- seldom stamped twice, and ZADD NX, which says how many it added, then
  -- saves counting them (numbers are written with '%d', as a number that
  -- Lua turns into text itself is written with '%.14g', which costs more).
  local stamp = format('%d', stamped)
  local added, n = 0, 0
  while added < count do
    local batch, more = math.min(count - added, 100), nil
    if batch == 1 then
      -- One entry, the usual request: sent without a table to unpack.
      n = n + 1
      more = redis.call('ZADD', key, 'NX', stamp, format('%s:%d', stamp, n))
    else
      local entries = {}
      for _ = 1, batch do
        n = n + 1
        entries[#entries + 1] = stamp
        entries[#entries + 1] = format('%s:%d', stamp, n)
      end
      more = redis.call('ZADD', key, 'NX', unpack(entries))
    end
    if more < batch and added == 0 then
      -- Some were there: go on from the last number taken.
      n = redis.call('ZCOUNT', key, stamp, stamp)
    end
    added = added + more
  end
  redis.call('PEXPIRE', key, format('%d', math.ceil((horizon + stamped - now) / 1000) + 1000))
end

-- Remove `given` entries stamped `stamped` from the set `key`, the latest
-- first, so that the "<time>:<number>" members left stay unique.
local function remove(stamped, key, given)
  local stamp = format('%d', stamped)
  local members = redis.call('ZRANGEBYSCORE', key, stamp, stamp)
  local numbers = {}
  for _, member in ipairs(members) do
    numbers[#numbers + 1] = tonumber(string.match(member, ':(%d+)$'))
  end
  table.sort(numbers, function(a, b) return a > b end)
  for n = 1, math.min(given, #numbers) do
    redis.call('ZREM', key, stamp .. ':' .. numbers[n])
  end
end

-- Free turns: a reservation given back while later ones wait keeps its
-- entries, still counted by every layer, and is marked free for the next
-- request to take in its place, the same turn (see shaping.lua): the set
-- of turns is then one the log admitted, so every window keeps its count.
-- A mark is the member "f<time>:<number>", scored minus the turn's time:
-- no layer counts it (they count from now - window, above 0), nor does
-- the removal of old entries (from 0), and "w" scores minus a window in
-- seconds, far above minus a time in microseconds. The marks of turns
-- gone by at `now` go first: marks are only made here, so they never pile
-- up (and a turn gone by is never taken).
local function mark(now, stamped, key, given)
  local window = tonumber(redis.call('ZSCORE', key, 'w'))
  if window then
    redis.call('ZREMRANGEBYSCORE', key, format('(%d', -now), format('(%d', window))
  end
  local stamp = format('%d', stamped)
  local score = format('%d', -stamped)
  local n = redis.call('ZCOUNT', key, score, score)
  for _ = 1, given do
    -- Numbered on from the marks of this time, past any number still used.
    repeat
      n = n + 1
    until not redis.call('ZSCORE', key, 'f' .. stamp .. ':' .. n)
    redis.call('ZADD', key, score, 'f' .. stamp .. ':' .. n)
  end
end

-- Whether `given` entries stamped `stamped` can be kept free: `key` holds
-- that many of them not marked yet (not when it was reset since, say), and
-- a turn reserved after them.
local function later(key, stamped, given)
  local stamp = format('%d', stamped)
  local score = format('%d', -stamped)
  return redis.call('ZCOUNT', key, stamp, stamp) - redis.call('ZCOUNT', key, score, score) >= given
    and redis.call('ZCOUNT', key, '(' .. stamp, '+inf') > 0
end

-- Take the earliest free turn of `key` from `now` to `last` that has
-- `cost` marks, and return its time (nil for none): one command when there
-- is none.
local function claim(now, last, cost, key)
  local marks = redis.call('ZRANGEBYSCORE', key, format('%d', -last), format('%d', -now), 'WITHSCORES')
  local n = #marks
  if n < 2 * cost or marks[n] ~= marks[n - 2 * cost + 2] then
    return nil
  end
  for m = n - 1, n - 2 * cost + 1, -2 do
    redis.call('ZREM', key, marks[m])
  end
  return -tonumber(marks[n])
end

return {
  check = function(now, cost, quota, name, key, _, _, burst)
    local period = name * 1000000
    local since = format('(%d', now - period)
    -- The entries in the window, and the reservations after it.
    local used = redis.call('ZCOUNT', key, since, '+inf')
    if used + cost <= quota then
      if cost > 0 then
        -- Reset a window after this entry: after the newest one too, but
        -- for a plain layer on a set that a shaped limit shares, where a
        -- later turn may be reserved (reading it would cost every request).
        return true, quota - used - cost, period, 0, burst and 'r' or '', period
      end
      if used == 0 then
        return true, quota, 0, 0
      end
    end
    -- Back to the full quota once the newest entry, which may be a
    -- reservation, is out of the window.
    local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    local stamp = tonumber(newest[2])
    local reset = stamp and stamp > 0 and max(stamp + period - now, 0) or 0
    if used + cost <= quota then
      return true, quota - used, reset, 0
    end
    local retry = 0
    if cost <= quota then
      -- The request fits once the excess-th oldest entry in the window is
      -- out, and at every moment after. (One costing more than the quota
      -- never fits; main.lua handles it.)
      local excess = used + cost - quota
      local entry = redis.call('ZRANGEBYSCORE', key, since, '+inf', 'WITHSCORES', 'LIMIT', excess - 1, 1)
      retry = tonumber(entry[2]) + period - now
    end
    return false, max(quota - used, 0), reset, retry
  end,

  -- A refund is given back once for the whole set, by store(); a shaped
  -- layer marks it, as check() does, so that the entries go from the
  -- reserved turn, or 'k' when the turn is `kept` free (see mark()).
  refund = function(_, _, _, _, _, _, _, burst, kept)
    return kept and 'k' or burst and 'r' or '', 0
  end,

  later = later,
  claim = claim,

  -- What the layers of the request noted: `horizon` is the longest window
  -- of those that counted it; a negative cost is a refund, whose entries
  -- are removed, or marked free when a layer kept the turn ('k'). The
  -- entries are stamped now + wait when a shaped layer marked the set
  -- (`written` is not empty), else now.
  store = function(now, cost, key, written, horizon, wait)
    local stamped = written == '' and now or now + wait
    if cost > 0 then
      add(now, stamped, key, horizon, cost)
    elseif string.find(written, 'k', 1, true) then
      mark(now, stamped, key, -cost)
    else
      remove(stamped, key, -cost)
    end
  end,
}
