-- Packed keys: fixed-window, sliding-window and GCRA keep every layer of an
-- identity under one scope in one string, a record per layer, separated by
-- spaces: "<window>=<record>", where <window> is the layer's window in whole
-- seconds and <record> is the strategy's own. A layer's record is found by
-- its window, so records that other limits sharing the scope wrote are kept
-- (while they are live). One GET and at most one SET per key, whatever the
-- number of layers. The key's TTL is the longest live record's, plus a
-- second: the second means a key is never gone early when the time a script
-- decides at is a moment behind Redis's expiry clock, as it is when tests
-- pin the time.
--
-- Every request runs this, so it builds as little as it can: the value is
-- searched in place rather than split into tables, and one table per key
-- holds what the request will write: the names of the layers noted, in
-- order, and each one's new record under its name.

local packed = {}
local find = string.find

-- Read `key`. `pattern` matches a record's fields after "<window>=",
-- anchored with '^', capturing them as text.
function packed.load(key, pattern)
  local value = redis.call('GET', key)
  return {key = key, value = value and ' ' .. value or '', pattern = pattern, matched = 0, life = 0}
end

-- The fields of layer `name`'s record in `state`, as text, or nil when it
-- has none. Counts the characters read, so store() knows whether every
-- record was read once.
function packed.fields(state, name)
  local value = state.value
  local at = find(value, ' ' .. name .. '=', 1, true)
  if not at then
    return nil
  end
  local _, last, a, b = find(value, state.pattern, at + #name + 2)
  if not last then
    return nil
  end
  state.matched = state.matched + last - at + 1
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

-- Write the records noted, and those read that are still live, if anything
-- was noted. life(a, b, period) is how many more microseconds a record read
-- and not noted again must be kept; 0 or less, and it goes. When every
-- record of the value was read exactly once (the usual case: one limit per
-- scope), the records not noted are only those that were not worth writing.
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
  if state.matched ~= #value then
    local pattern = state.pattern
    for name, record in string.gmatch(value, ' (%d+)=(%S+)') do
      local a, b = string.match(record, pattern)
      if a and state[name] == nil then
        local left = life(a, b, name * 1000000)
        if left > 0 then
          parts[#parts + 1] = name .. '=' .. record
          if left > longest then
            longest = left
          end
        end
      end
    end
  end
  redis.call('SET', state.key, table.concat(parts, ' '), 'PX', math.ceil(longest / 1000) + 1000)
end
