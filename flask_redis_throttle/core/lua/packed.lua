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

local packed = {}

-- Read `key`: each record's two fields, as `pattern` captures them after
-- its name ("<a>:<b>", or just "<a>" when <b> is empty), in `a` and `b` by
-- name, as text (so `a` also says which names were read).
function packed.load(key, pattern)
  local a, b, order = {}, {}, {}
  local value = redis.call('GET', key)
  if value then
    for name, x, y in string.gmatch(value, pattern) do
      a[name], b[name] = x, y
      order[#order + 1] = name
    end
  end
  return {key = key, a = a, b = b, order = order, life = 0}
end

-- Note the new record of layer `name`, as the whole "<name>=<record>", to be
-- kept `life` more microseconds. (Callers build that string in one go: each
-- new string Lua makes costs, and a record changes with every request.)
local function note(state, name, part, life)
  local new = state.new
  if not new then
    new = {}
    state.new = new
  end
  if not new[name] and not state.a[name] then
    state.order[#state.order + 1] = name
  end
  new[name] = part
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

-- Write the records noted and those read that are still live, if anything
-- was noted. life(a, b, period) is how many more microseconds a record read
-- and not noted again must be kept; 0 or less, and it goes.
function packed.store(state, life)
  local new = state.new
  if not new then
    return
  end
  local parts, longest = {}, state.life
  local a, b = state.a, state.b
  for _, name in ipairs(state.order) do
    local part = new[name]
    if not part then
      local left = life(a[name], b[name], name * 1000000)
      if left > longest then
        longest = left
      end
      if left > 0 then
        part = b[name] == '' and name .. '=' .. a[name] or name .. '=' .. a[name] .. ':' .. b[name]
      end
    end
    parts[#parts + 1] = part
  end
  if #parts == 0 then
    redis.call('DEL', state.key)
  else
    redis.call('SET', state.key, table.concat(parts, ' '), 'PX', math.ceil(longest / 1000) + 1000)
  end
end
