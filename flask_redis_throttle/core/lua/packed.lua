-- Packed keys, for the general script (see records.lua for the layout):
-- one table per key holds what the request will write, the names of the
-- layers noted, in order, and each one's new record under its name. The
-- strategies' files call these through `packed`.

local packed = {}

-- The patterns of a strategy whose record is `fields`, a pattern with two
-- captures: the next record, read where the last one ended ("^<window>=",
-- the fields, the space after); the fields that follow "=" (for a search by
-- window); and a record alone, anchored.
local function patterns(fields)
  return '^(%d+)=' .. fields .. ' ?', '=' .. fields, '^' .. fields
end

-- Read `key`, whose records match `fields` (see patterns()).
function packed.load(key, fields)
  local anchored, named, whole = patterns(fields)
  local value = redis.call('GET', key) or ''
  return {key = key, value = value, anchored = anchored, named = named, whole = whole, at = 1, life = 0}
end

-- The fields of layer `name`'s record in `state`, as text, or nil when it
-- has none. Notes where the next record starts (see records.lua's read()).
function packed.fields(state, name)
  local a, b, at = read(state.value, state.at, name, state.anchored, state.named)
  state.at = at
  return a, b
end
local fields = packed.fields

-- Note the new record of layer `name`, as the whole "<name>=<record>", to be
-- kept `life` more microseconds. (Callers build that string in one go: each
-- new string Lua makes costs, and a record changes with every request.)
local function note(state, name, part, life)
  if state[name] == nil then
    state[#state + 1] = name
  end
  state[name] = part
  if life > state.life then
    state.life = life
  end
end

-- Whether layer `name` of `state` is refunded now for the first time: a
-- layer that two limits share is given back once.
function packed.first_refund(state, name)
  local refunded = state.refunded
  if not refunded then
    refunded = {}
    state.refunded = refunded
  end
  if refunded[name] then
    return false
  end
  refunded[name] = true
  return true
end

-- Write the records noted, and those read that are still live (see
-- records.lua's keep()), if anything was noted. When every record of the
-- value was read once, in order (the usual case: one limit per scope),
-- none is left.
function packed.store(state, life)
  local count = #state
  if count == 0 then
    return
  end
  local parts, longest = {}, state.life
  for k = 1, count do
    parts[k] = state[state[k]]
  end
  local value = state.value
  if state.at <= #value then
    local function noted(name)
      return state[name] ~= nil
    end
    count, longest = keep(value, state.whole, life, noted, parts, count, longest)
  end
  set(state.key, table.concat(parts, ' ', 1, count), longest)
end
