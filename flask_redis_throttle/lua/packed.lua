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

function packed.load(key)
  local old, order = {}, {}
  local value = redis.call('GET', key)
  if value then
    for name, record in string.gmatch(value, '(%d+)=(%S+)') do
      old[name] = record
      order[#order + 1] = name
    end
  end
  return {key = key, old = old, order = order, life = 0}
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
  if not new[name] and not state.old[name] then
    state.order[#state.order + 1] = name
  end
  new[name] = part
  if life > state.life then
    state.life = life
  end
end

-- Call refund(record, quota, period, name) for each layer of `entry` not
-- refunded yet in this key, with the record as read or as noted since.
function packed.refund(state, entry, refund)
  state.refunded = state.refunded or {}
  local refunded, old = state.refunded, state.old
  for quota, name in string.gmatch(entry, '(%d+)/(%d+)') do
    local new = state.new and state.new[name]
    local record = new and string.sub(new, #name + 2) or old[name]
    if record and not refunded[name] then
      refunded[name] = true
      refund(record, tonumber(quota), name * 1000000, name)
    end
  end
end

-- Write the records noted and those read that are still live, if anything
-- was noted. life(record, period) is how many more microseconds a record
-- read and not noted again must be kept; 0 or less, and it goes.
function packed.store(state, life)
  if not state.new then
    return
  end
  local parts, longest = {}, state.life
  local new, old = state.new, state.old
  for _, name in ipairs(state.order) do
    local part = new[name]
    if not part then
      local record = old[name]
      local left = life(record, name * 1000000)
      if left > longest then
        longest = left
      end
      part = left > 0 and name .. '=' .. record
    end
    parts[#parts + 1] = part or nil
  end
  if #parts == 0 then
    redis.call('DEL', state.key)
  else
    redis.call('SET', state.key, table.concat(parts, ' '), 'PX', math.ceil(longest / 1000) + 1000)
  end
end
