-- Shaping: a limit with a delay lets a request that is over its rate wait
-- for its turn, up to that delay, rather than be refused. The script
-- reserves the turn when it decides: the layers of every delayed entry are
-- checked, and written, at the time the request will run, now + wait, so
-- that requests that wait keep the rate as exactly as those that do not,
-- across every process that shares the keys. GCRA and the sliding log
-- have a delay (the Policy refuses any other strategy): their retry is
-- exact, and a layer fits at every time after it, so at now + wait each
-- delayed layer fits. GCRA moves its TAT to the turn; the sliding log
-- stamps its entries with it (see sliding_log.lua).
--
-- A plan entry's flag byte (see main.lua) has bit 0 for a penalty and bit
-- 1 for a delay: after the penalty's 12 bytes (if any), the longest wait,
-- in milliseconds, and the burst (see gcra.lua; 0 for the quota), 4 bytes
-- each. An entry with neither is 0, as it always was.

-- Where the entry after the one whose flag byte is at `flag` starts, and
-- the entry's flags: whether it has a penalty, its delay in microseconds
-- (0 for none) and its burst (nil for none).
local function entry_end(plan, flag)
  local flags = string.byte(plan, flag)
  local penalized = flags % 2 == 1
  local after = penalized and flag + 13 or flag + 1
  if flags >= 2 then
    local delay, burst = struct.unpack('<I4I4', plan, after)
    return after + 8, penalized, delay * 1000, burst
  end
  return after, penalized, 0, nil
end

-- How long a request of `cost` at `now` must wait before it runs: the
-- longest retry of the layers of the entries that have a delay, if it is
-- within the shortest of their delays; else 0, and main.lua decides at
-- `now`, refusing as usual. A layer whose whole quota is less than the cost
-- never fits, however long it waits. A refund is given the wait of the call
-- that admitted it, ARGV[4] (a sliding log finds its entries at now + wait).
-- Also what it read of each packed key, by entry ('' for none), which
-- main.lua takes rather than read the key again (nil when nothing was read).
--
-- And whether the turn is a free one: a reserved turn given back while a
-- later one is reserved (a wait abandoned in the middle of the line) is
-- kept, its entries in the sliding log marked free and the pace's TAT left
-- as it is, and the next request of a plan whose every entry has a delay
-- (and no penalty) takes it, if it is sooner than its own turn and within
-- its delay: the turns reserved are then ones the layers admitted, so
-- every window keeps its count, and a turn freed in the middle of the line
-- goes to the next caller rather than sit past every caller's deadline
-- (see sliding_log.lua's mark()). The last turn reserved is given back to
-- the layers as before. A plan of GCRA alone has nowhere to mark a turn.
local function shaping_wait(now, cost, plan)
  if cost < 0 then
    local wait = tonumber(ARGV[4]) or 0
    local e, at = 0, 1
    while wait > 0 and at <= #plan do
      e = e + 1
      local next_at, _, delay = entry_end(plan, at + 3 + 8 * string.byte(plan, at + 2))
      local later = strategies[string.sub(plan, at, at + 1)].later
      if delay > 0 and later then
        return wait, nil, later(KEYS[e], now + wait, -cost)
      end
      at = next_at
    end
    return wait, nil, false
  end
  if cost == 0 then
    return 0, nil, false
  end
  local wait, bound, read = 0, nil, {}
  local e, at = 0, 1
  -- Where free turns may be taken from: the sliding log's, when every
  -- entry has a delay and none a penalty.
  local log, log_key, whole = nil, nil, true
  while at <= #plan do
    e = e + 1
    local first = at + 3
    local flag = first + 8 * string.byte(plan, at + 2)
    local next_at, penalized, delay, burst = entry_end(plan, flag)
    whole = whole and delay > 0 and not penalized
    if delay > 0 then
      local strategy = strategies[string.sub(plan, at, at + 1)]
      local size = strategy.size
      local value = size and redis.call('GET', KEYS[e]) or ''
      read[e] = value
      if strategy.claim and not log then
        log, log_key = strategy, KEYS[e]
      end
      for layer_at = first, flag - 8, 8 do
        local quota, name = struct.unpack('<I4I4', plan, layer_at)
        if cost > quota or (burst > 0 and cost > burst) then
          return 0, read, false
        end
        local p = size and locate(value, name, size) or nil
        local fit, _, _, retry = strategy.check(now, cost, quota, name, KEYS[e], value, p, burst)
        if not fit and retry > wait then
          wait = retry
        end
      end
      if not bound or delay < bound then
        bound = delay
      end
    end
    at = next_at
  end
  if not bound then
    return 0, read, false
  end
  if log and whole and wait > 0 then
    local turn = log.claim(now, now + math.min(wait - 1, bound), cost, log_key)
    if turn then
      return turn - now, read, true
    end
  end
  if wait <= bound then
    return wait, read, false
  end
  return 0, read, false
end
