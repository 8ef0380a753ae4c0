-- Packed keys, for the general script (see records.lua for the layout):
-- one table per key holds what the request will write, the windows of the
-- layers noted, in order, and each one's new record. The strategies' files
-- call these through `packed`.

local packed = {}

-- Read `key`, whose records are packed as `record` (a struct format whose
-- first field is the window) and are `size` bytes each.
function packed.load(key, record, size)
  local value = redis.call('GET', key) or ''
  return {key = key, value = value, record = record, size = size, at = 1, life = 0, names = {}, parts = {}}
end

-- The fields of layer `name`'s record in `state`, the window left out, or
-- nothing when it has none. Notes where the next record is looked for
-- first (see records.lua's locate()).
function packed.fields(state, name)
  local p, at = locate(state.value, state.at, name, state.size)
  state.at = at
  if p then
    return select(2, unpack_bytes(state.record, state.value, p))
  end
end
local fields = packed.fields

-- Note the new record of layer `name`, packed whole, to be kept `life` more
-- microseconds.
local function note(state, name, part, life)
  local parts = state.parts
  if parts[name] == nil then
    state.names[#state.names + 1] = name
  end
  parts[name] = part
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
  local names, noted = state.names, state.parts
  local count = #names
  if count == 0 then
    return
  end
  local parts, longest = {}, state.life
  for k = 1, count do
    parts[k] = noted[names[k]]
  end
  local value = state.value
  if state.at <= #value then
    local function written(name)
      return noted[name] ~= nil
    end
    count, longest = keep(value, state.size, life, written, parts, count, longest)
  end
  set(state.key, table.concat(parts, '', 1, count), longest)
end
