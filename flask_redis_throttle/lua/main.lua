-- What every request shares, whatever its strategies: reading the clock and
-- the plan, checking every layer before writing anything, penalties, and the
-- reply. The loader puts it after the files of the strategies the request
-- uses (see scripts.py); each registers a table under its two-letter code in
-- `strategies`, with these functions:
--
--   load(key) -> state
--     reads the key once; every layer of the request kept in it is then
--     checked against this state, so a key that two of the request's limits
--     share (the same identity, scope and strategy) is read once
--   check(state, name, quota, period, now, cost) -> fits, remaining, reset, retry
--     fits       true if `cost` more requests fit in this layer now
--     remaining  the quota left: after this request if it fits, else as it is
--     reset      microseconds until the layer is back to its full quota
--     retry      microseconds until `cost` requests would fit (0 if they do);
--                never early, and exact: one microsecond sooner would not do
--     Only reads.
--   commit(state, name, quota, period, now, cost)
--     notes the admitted hit in the state; computed from what load() read,
--     so a layer two limits share is counted once however often it is noted
--   refund(state, name, quota, period, now, cost)
--     gives back `cost` that a request admitted at `now` took, as if it had
--     never been admitted; `now` is the time the admitting call decided at;
--     once per layer and key, however many limits share them
--   store(state, now)
--     writes what commit() or refund() noted, always with a TTL
--
-- A layer's record is found by `name`, its window in seconds as the plan
-- gives it, so layers of other limits that share the key are kept.
-- Numbers too big for Lua's 14-digit number-to-string conversion
-- (timestamps have 16 digits) are formatted with '%.0f' before Redis sees
-- them.
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
--   ARGV[3]   the plan: one entry per key, separated by spaces, each the
--             strategy's code, then its layers as quota/window (whole
--             seconds) separated by commas, then for a penalty "!" and its
--             first block, factor and longest block, as in
--             "fw10/1,120/60" or "gc5/60!60,2,3600"
--
-- The layers are numbered in the plan's order, from 1. Every layer is
-- checked before any key is written, and nothing is written unless all of
-- them have room: a refused request consumes no quota. A request that costs
-- more than a layer's whole quota never fits; its retry is that window.
--
-- Reply, a flat array of integers:
--   [1] 1 if admitted, 0 if refused
--   [2] the deciding layer: when refused, the full layer whose wait is
--       longest; when admitted, the layer with the least quota left (the
--       later reset breaks ties)
--   [3] the quota that layer has left
--   [4] microseconds until that layer is back to its full quota
--   [5] microseconds until the request would pass (0 when admitted)
--   [6] now: the time it was decided at, for a refund of it later
--   [7] only when some entry has a penalty: 1 if the deciding layer refused
--       because of a penalty, else 0
--
-- A refund replies {1, 0, 0, 0, 0, now}.

local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local cost = tonumber(ARGV[2])

-- The plan, read into entries (one per key) and layers (numbered from 1).
local entries, states = {}, {}
local owner, names, quotas, periods = {}, {}, {}, {}
local layers, punished = 0, {}
for code, spec, penalty in string.gmatch(ARGV[3], '(%a%a)([%d/,]*)!?([%d,]*)') do
  local e = #entries + 1
  local key = KEYS[e]
  local strategy = strategies[code]
  local state = states[key]
  if not state then
    state = strategy.load(key)
    states[key] = state
  end
  local entry = {key = key, strategy = strategy, state = state, first = layers + 1}
  for quota, name in string.gmatch(spec, '(%d+)/(%d+)') do
    layers = layers + 1
    owner[layers], names[layers] = entry, name
    quotas[layers], periods[layers] = tonumber(quota), tonumber(name) * 1000000
  end
  entry.last = layers
  if penalty ~= '' then
    entry.penalty = penalty
    punished[#punished + 1] = entry
  end
  entries[e] = entry
end

-- Each distinct key once, in the order of the plan.
local function store_all()
  for _, entry in ipairs(entries) do
    local state = entry.state
    if not state.stored then
      state.stored = true
      entry.strategy.store(state, now)
    end
  end
end

if cost < 0 then
  local done = {}
  for i = 1, layers do
    local entry = owner[i]
    local layer = entry.key .. ' ' .. names[i]
    if not done[layer] then
      done[layer] = true
      entry.strategy.refund(entry.state, names[i], quotas[i], periods[i], now, -cost)
    end
  end
  store_all()
  return {1, 0, 0, 0, 0, now}
end

local groups, blocked = nil, {}
if #punished > 0 then
  groups, blocked = penalties.load(punished, #entries, now)
end

local admitted = true
local missed = {}
local pick, pick_remaining, pick_reset, pick_retry = 0, 0, 0, -1
for i = 1, layers do
  local entry = owner[i]
  local quota, period = quotas[i], periods[i]
  local fits, remaining, reset, retry = entry.strategy.check(entry.state, names[i], quota, period, now, cost)
  if cost > quota then
    fits, retry = false, period
  end
  missed[i] = not fits
  if blocked[i] then
    fits, remaining, retry = false, 0, math.max(retry, blocked[i])
  end
  local better
  if not fits then
    better = admitted or retry > pick_retry
    admitted = false
  elseif admitted then
    better = pick == 0 or remaining < pick_remaining
      or (remaining == pick_remaining and reset > pick_reset)
  end
  if better then
    pick, pick_remaining, pick_reset, pick_retry = i, remaining, reset, retry
  end
end

local penalized = blocked[pick] ~= nil
if not admitted and cost > 0 and groups then
  -- The wait this refusal gives must cover the block it starts.
  local offender, wait = penalties.punish(groups, missed, now)
  if wait > pick_retry then
    pick, pick_remaining, pick_reset, pick_retry, penalized = offender, 0, wait, wait, true
  end
end

if admitted and cost > 0 then
  for i = 1, layers do
    local entry = owner[i]
    entry.strategy.commit(entry.state, names[i], quotas[i], periods[i], now, cost)
  end
  store_all()
end

local reply = {admitted and 1 or 0, pick, pick_remaining, math.ceil(pick_reset), math.ceil(pick_retry), now}
if groups then
  reply[7] = penalized and 1 or 0
end
return reply
