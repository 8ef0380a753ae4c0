-- The script: reading the plan, checking every layer before writing
-- anything, penalties, and the reply. The loader puts records.lua and
-- penalty.lua first, then the files of the strategies the request uses,
-- each a table of plain functions kept in `strategies` under its two-letter
-- code (see scripts.py), then shaping.lua (delays), then this; a plan
-- whose entries have neither a penalty nor a delay (their flag bytes 0)
-- is sent a script without penalty.lua and shaping.lua, whose functions
-- Redis would make on every call and this never calls for such a plan.
-- Every value a strategy's function uses is one of its parameters:
--
--   check(now, cost, quota, name, key, value, p[, burst])
--       -> fit, left, reset, retry[, record, life]
--     The verdict of a layer of `quota` per `name` seconds for a request
--     of `cost` at `now`: fit is true if it fits; left the quota left,
--     after this request if it fits, else as it is; reset microseconds
--     until the layer is back to its full quota, after this request if it
--     fits (0 when that is now); retry microseconds until
--     `cost` requests would fit (0 if they do), never early, and exact:
--     one microsecond sooner would not do. When it fits and cost > 0, also
--     what to write if the whole request is admitted: the layer's new
--     record, and how many microseconds it must be kept. For a packed
--     strategy (see records.lua), `value` is the key's string and `p`
--     where the layer's record starts in it (nil for none); it writes
--     nothing. `burst` is given for a shaped entry only (see shaping.lua).
--   refund(now, given, quota, name, key, value, p[, burst, kept]) -> record, life
--     the record of the layer once `given`, which a request admitted at
--     `now` took, is handed back, as if it had never been admitted;
--     nothing when there is nothing to give back. `kept` is true for a
--     reserved turn kept free for the next request (see shaping.lua):
--     nothing is given back to the layer then
--   size          a packed strategy's record size, in bytes
--   life(now, value, p, period)
--     a packed strategy's: how many more microseconds the record at p,
--     of a window of `period` microseconds, must be kept (see records.lua)
--   store(now, cost, key, records, life, wait, token)
--     a strategy that is not packed writes `key` itself, once, if any of
--     its layers gave a record: `records` joins those of every entry on
--     the key, `life` is the longest life they gave, `wait` the
--     request's (see shaping.lua), and `token` ARGV[5]
--   unit          true for a strategy a request takes one of whatever its
--                 cost (concurrency.lua's slots): never over its quota
--
-- Every layer is checked against what its key held before the request:
-- a key that two of the request's limits share (the same identity, scope
-- and strategy) is read once, and a layer they share is counted once. Its
-- records are found by their names, their windows in seconds as the plan
-- gives them, so layers of other limits that share a key are kept (see
-- records.lua). Numbers of 15 digits or more (timestamps have 16) that
-- Redis is given as text are formatted with '%.0f' or '%d' first: Lua
-- writes numbers with 14 significant digits.
--
-- Calling convention:
--   KEYS[e]   the key of plan entry e: one identity's layers under one
--             limit's scope and strategy, all in the identity's {hash tag};
--             then the penalty key of each entry that has a penalty, in
--             the order of the entries (see penalty.lua)
--   ARGV[1]   now, in microseconds since the epoch; "" means "read Redis
--             TIME" (production always sends ""; tests pin time)
--   ARGV[2]   the cost of this request; 0 inspects without writing; a
--             negative cost refunds -cost to every layer, at the `now` of
--             ARGV[1], which must be the admitting call's
--   ARGV[3]   the plan: one entry per key, one after the other, in binary
--             (little-endian unsigned integers, as struct packs them):
--             the strategy's two-letter code, the number of layers (1
--             byte), each layer's quota and window in whole seconds (4
--             bytes each), then 1 byte: 1 when the first block, factor
--             and longest block of a penalty follow (4 bytes each), else
--             0 (see codec.py's entry()); plus 2 when a delay and a
--             burst follow that (4 bytes each; see shaping.lua)
--   ARGV[4]   a refund's only, and optional: the wait, in microseconds,
--             that the admitting call replied (see shaping.lua)
--   ARGV[5]   the request's token, when its plan holds concurrency slots
--             and its cost is not 0: random, the admission's and its
--             refund's alike, by which the refund finds the slots it took
--             (see concurrency.lua)
--
-- Every layer is checked before any key is written, and nothing is written
-- unless all of them have room: a refused request consumes no quota. A
-- request that costs more than a layer's whole quota never fits; its retry
-- is that window, and the first such layer in the plan's order decides
-- the request, whatever the other layers' waits and penalties (the layer
-- the extension's 429 names: see _request/decisions.py's _over_quota()).
--
-- Reply, a flat array of integers:
--   [1] 1 if admitted, 0 if refused
--   [2] the deciding layer, numbered from 1 in the plan's order: when
--       refused, the first layer whose whole quota is less than the cost,
--       else the full layer whose wait is longest; when admitted, the
--       layer with the least quota left (the later reset breaks ties)
--   [3] the quota that layer has left
--   [4] microseconds until that layer is back to its full quota: 0 when
--       it has it, on every strategy
--   [5] microseconds until the request would pass; when admitted, how
--       long it must wait before it runs: 0 unless it was shaped (see
--       shaping.lua)
--   [6] now: the time it was decided at, for a refund of it later
--   [7] only when some entry has a penalty: 1 if the deciding layer refused
--       because of a penalty, else 0
--
-- A refund replies {1, 0, 0, 0, 0, now}.
--
-- One pass over the plan decides every layer, and builds no table per key
-- or layer: each one costs Redis more than the arithmetic.

local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = time[1] * 1000000 + time[2]
end
-- (Arithmetic reads a number from text once; tonumber() reads it twice.)
local cost = ARGV[2] + 0
local plan = ARGV[3]
local byte, sub, unpack_bytes, max = string.byte, string.sub, struct.unpack, math.max
-- Shaping: the entries with a delay are decided at now + wait (see
-- shaping.lua); the others at now. The wait is worked out when the first
-- entry with a delay is met, so a plan without one is not walked for it;
-- what it read of each key, by entry, is not read again.
-- Whether the turn is a free one (see shaping.lua): taken by this
-- request, which no layer then counts again, or given back by this refund.
local wait, shaped, read, free = 0, false, nil, false

-- The deciding layer so far, its verdict, whether it is refused by a
-- penalty, and whether the cost is more than its whole quota; and whether
-- every layer so far fits.
local pick, pick_left, pick_reset, pick_retry, pick_penalized, pick_over = 0, 0, 0, -1, false, false
local admitted = true

-- Each key of the request once, in the order of the plan, as five slots:
-- the key, its strategy, what it held (a packed key's string), and what it
-- will be written if the request is admitted and how long that lives (nil
-- for nothing).
-- Both tables are made with room for the common request, two keys of
-- three layers: one grown from empty is rehashed at every power of two,
-- which cost Redis more than all else the tables do (Lua 5.1 has no
-- other way to size a table than a constructor of that many items).
local keys, k = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}, 0
-- The records an entry writes.
local parts = {nil, nil, nil}
-- The entries that have a penalty, and how many entries the plan has.
local groups, entries = nil, nil

local layer, e, at = 0, 0, 1
while at <= #plan do
  e = e + 1
  local key = KEYS[e]
  local strategy = strategies[sub(plan, at, at + 1)]
  local size = strategy.size
  -- The entry's layers (each its quota and window in seconds, '<I4I4'),
  -- from `first` to `last`, then its penalty's flag.
  local first = at + 3
  local flag = first + 8 * byte(plan, at + 2)
  local last = flag - 8
  local penalized, delay, burst = false, 0, nil
  if byte(plan, flag) == 0 then
    -- Neither a penalty nor a delay, the usual entry: it ends at its flag,
    -- with no call to read flags it has not.
    at = flag + 1
  else
    at, penalized, delay, burst = entry_end(plan, flag)
  end
  if delay > 0 and not shaped then
    wait, read, free = shaping_wait(now, cost, plan)
    shaped = true
    if free and cost > 0 then
      -- A free turn taken: the layers admitted it already, and its entries
      -- are still counted. It has none of its quota left, and the layer
      -- is full until a window after the turn, at the soonest.
      pick, pick_left, pick_reset = 1, 0, wait + unpack_bytes('<I4', plan, first + 4) * 1000000
      break
    end
  end
  local when = delay > 0 and now + wait or now
  local group = nil
  if penalized and cost >= 0 then
    if not entries then
      -- The penalty keys follow every entry's key.
      entries = 0
      local next_at = 1
      while next_at <= #plan do
        entries = entries + 1
        next_at = entry_end(plan, next_at + 3 + 8 * byte(plan, next_at + 2))
      end
      groups = {}
    end
    local base, factor, longest = unpack_bytes('<I4I4I4', plan, flag + 1)
    group = {key = KEYS[entries + #groups + 1], base = base * 1000000, factor = factor, longest = longest * 1000000}
    group.level, group.wait = penalty_of(group.key, now, group.longest)
    groups[#groups + 1] = group
  end
  -- The key's slots: a key that two limits share is read once.
  local slot = nil
  for s = 1, k, 5 do
    if keys[s] == key then
      slot = s
      break
    end
  end
  if not slot then
    slot, k = k + 1, k + 5
    local held = read and read[e]
    if held == nil then
      held = size and redis.call('GET', key) or ''
    end
    keys[slot], keys[slot + 1], keys[slot + 2] = key, strategy, held
  end
  local value = keys[slot + 2]
  -- The records this entry writes, the longest life of the key's, where
  -- the next record is looked for first, and the entry's first layer that
  -- refused on its own.
  local n, longest, hint, missed = 0, keys[slot + 4] or 0, 1, nil
  for layer_at = first, last, 8 do
    local quota, name = unpack_bytes('<I4I4', plan, layer_at)
    layer = layer + 1
    -- Where the layer's record is in a packed key: first looked for where
    -- the last one read ended, as one limit writes its layers in its
    -- plan's order.
    local p = nil
    if size then
      if hint <= #value - size + 1 and unpack_bytes('<I4', value, hint) == name then
        p, hint = hint, hint + size
      else
        p = locate(value, name, size)
      end
    end
    local record, life
    if cost < 0 then
      record, life = strategy.refund(now, -cost, quota, name, key, value, p, burst, free)
      if not record and p then
        -- Nothing to give back: the record stays as it is.
        record, life = sub(value, p, p + size - 1), strategy.life(now, value, p, name * 1000000)
      end
    else
      local fit, left, reset, retry
      fit, left, reset, retry, record, life = strategy.check(when, cost, quota, name, key, value, p, burst)
      if when > now then
        -- Reserved: its times are counted from now, not from when it runs
        -- (a set's store() is given the wait).
        reset = reset + wait
        if size and life then
          life = life + wait
        end
      end
      local over = cost > quota and not strategy.unit
      if over then
        fit, retry = false, name * 1000000
      end
      local blocked = false
      if group then
        if not fit and not missed then
          missed = layer
        end
        if group.wait > 0 then
          fit, left, retry, blocked = false, 0, max(retry, group.wait), true
        end
      end
      -- The deciding layer: when refused, the first layer whose whole
      -- quota is less than the cost, else the full layer whose wait is
      -- longest; when admitted, the one with the least quota left, the
      -- later reset breaking ties.
      if not fit then
        if admitted or not pick_over and (over or retry > pick_retry) then
          pick, pick_left, pick_reset, pick_retry, pick_penalized, pick_over = layer, left, reset, retry, blocked, over
        end
        admitted = false
      elseif admitted and (pick == 0 or left < pick_left or (left == pick_left and reset > pick_reset)) then
        pick, pick_left, pick_reset, pick_retry = layer, left, reset, retry
      end
    end
    if record and admitted then
      n = n + 1
      parts[n] = record
      if life > longest then
        longest = life
      end
    end
  end
  if group then
    group.missed = missed
  end
  if n > 0 then
    local pending = keys[slot + 3]
    if size and (pending or hint <= #value) then
      -- Records this entry does not write: those of other limits that
      -- share the key, or an earlier entry's on the same key.
      n, longest = keep(pending or value, size, strategy.life, now, plan, first, last, parts, n, longest)
    elseif pending and not size then
      -- A set that an earlier entry counts in too: its records with these.
      n = n + 1
      parts[n] = pending
    end
    keys[slot + 3], keys[slot + 4] = table.concat(parts, '', 1, n), longest
  end
end

if groups and not admitted and cost > 0 then
  -- Block each entry that is not blocked yet and has a layer that refused
  -- on its own; the wait this refusal gives must cover the longest block,
  -- unless a layer's whole quota is less than the cost: that one still
  -- decides, as no wait lets the request pass.
  local offender, block = 0, -1
  for _, group in ipairs(groups) do
    if group.missed and group.wait <= 0 then
      local this = punish(group.key, now, group.level, group.base, group.factor, group.longest)
      if this > block then
        offender, block = group.missed, this
      end
    end
  end
  if block > pick_retry and not pick_over then
    pick, pick_left, pick_reset, pick_retry, pick_penalized = offender, 0, block, block, true
  end
end

if admitted and cost ~= 0 then
  -- Write each key the request noted, once, in the order of the plan.
  for s = 1, k, 5 do
    local key, strategy, written = keys[s], keys[s + 1], keys[s + 3]
    if written then
      if strategy.size then
        -- Kept its longest record's life and a second (see records.lua). A
        -- number Redis is given is formatted with '%.17g'; '%d' costs less.
        redis.call('SET', key, written, 'PX', string.format('%d', math.ceil(keys[s + 4] / 1000) + 1000))
      else
        strategy.store(now, cost, key, written, keys[s + 4], wait, ARGV[5])
      end
    end
  end
end

if cost < 0 then
  return {1, 0, 0, 0, 0, now}
end
local reply = {admitted and 1 or 0, pick, pick_left, math.ceil(pick_reset), math.ceil(admitted and wait or pick_retry), now}
if groups then
  reply[7] = pick_penalized and 1 or 0
end
return reply
