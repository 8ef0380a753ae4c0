-- What every request shares, whatever its strategies: reading the plan,
-- checking every layer before writing anything, penalties, and the reply.
-- The loader puts prelude.lua and layers.lua first, then packed.lua and
-- the files of the strategies the request uses (see scripts.py), then
-- penalty.lua and this.
-- Each strategy registers a table under its two-letter code in
-- `strategies`, with these functions:
--
--   load(key) -> state
--     reads the key once; every layer of the request kept in it is then
--     checked against this state, so a key that two of the request's limits
--     share (the same identity, scope and strategy) is read once
--   check(state, plan, first_layer, last_layer, i) -> i
--     checks each layer of a plan entry, the layers at `first_layer` to
--     `last_layer` of `plan` (see prelude.lua's entry_at()), numbering them on from
--     i, and fills the layer tables of layers.lua for each (see there):
--       fits       true if `cost` more requests fit in this layer now
--       remaining  the quota left: after this request if it fits, else as it is
--       resets     microseconds until the layer is back to its full quota
--       retries    microseconds until `cost` requests would fit (0 if they
--                  do); never early, and exact: one microsecond sooner
--                  would not do
--     It writes nothing. For each layer that fits, when cost > 0, it notes
--     in the state what store() writes if the whole request is admitted,
--     worked out from what load() read; so a layer two limits share is
--     counted once however often it is checked. Returns the last number.
--   refund(state, plan, first_layer, last_layer, given)
--     notes that `given`, which a request admitted at `now` took, is handed
--     back to each layer of the entry, as if it had never been admitted;
--     `now` is then the time the admitting call decided at. Once per layer
--     and key, however many limits share them.
--   store(state)
--     writes what check() or refund() noted, always with a TTL
--
-- A layer's record is found by its name, its window in seconds as the plan
-- gives it, so layers of other limits that share a key are kept (see
-- records.lua). Numbers of 15 digits or more (timestamps have 16) that
-- Redis is given as text are formatted with '%.0f' first: Lua writes
-- numbers with 14 significant digits.
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
--             0 (see codec.py's entry())
--
-- Every layer is checked before any key is written, and nothing is written
-- unless all of them have room: a refused request consumes no quota. A
-- request that costs more than a layer's whole quota never fits; its retry
-- is that window.
--
-- Reply, a flat array of integers:
--   [1] 1 if admitted, 0 if refused
--   [2] the deciding layer, numbered from 1: when refused, the full layer
--       whose wait is longest; when admitted, the layer with the least
--       quota left (the later reset breaks ties)
--   [3] the quota that layer has left
--   [4] microseconds until that layer is back to its full quota
--   [5] microseconds until the request would pass (0 when admitted)
--   [6] now: the time it was decided at, for a refund of it later
--   [7] only when some entry has a penalty: 1 if the deciding layer refused
--       because of a penalty, else 0
--
-- A refund replies {1, 0, 0, 0, 0, now}.

-- The plan: each entry's key is loaded once and its layers checked (or,
-- for a refund, given back).
local states, loaded = {}, {}
local layers, punished = 0, nil
local keys = 0
local plan, at = ARGV[3], 1
while at <= #plan do
  keys = keys + 1
  local key = KEYS[keys]
  local strategy = strategies[string.sub(plan, at, at + 1)]
  local first_layer, last_layer, penalty
  first_layer, last_layer, penalty, at = entry_at(plan, at)
  local state = states[key]
  if not state then
    state = strategy.load(key)
    state.strategy = strategy
    states[key] = state
    loaded[#loaded + 1] = state
  end
  if cost < 0 then
    strategy.refund(state, plan, first_layer, last_layer, -cost)
  else
    local from = layers + 1
    layers = strategy.check(state, plan, first_layer, last_layer, layers)
    if penalty then
      punished = punished or {}
      punished[#punished + 1] = {first = from, last = layers, penalty = {unpack_bytes('<I4I4I4', plan, penalty)}}
    end
  end
end

-- Each distinct key once, in the order of the plan.
local function store_all()
  for _, state in ipairs(loaded) do
    state.strategy.store(state)
  end
end

if cost < 0 then
  store_all()
  return {1, 0, 0, 0, 0, now}
end

local groups, blocked = nil, {}
if punished then
  groups, blocked = penalties.load(punished, keys, now)
end

local missed = groups and {}
for layer = 1, layers do
  local fit, left, reset, retry = fits[layer], remaining[layer], resets[layer], retries[layer]
  if cost > quotas[layer] then
    fit, retry = false, periods[layer]
  end
  if missed then
    missed[layer] = not fit
  end
  if blocked[layer] then
    fit, left, retry = false, 0, math.max(retry, blocked[layer])
  end
  -- include: decide.lua
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
  store_all()
end

local answer = reply()
if groups then
  answer[7] = penalized and 1 or 0
end
return answer
