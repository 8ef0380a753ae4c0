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
  return {key = key, old = old, order = order, new = {}, changed = false}
end

-- The record of layer `name`: what commit() or refund() left, else what was read.
function packed.get(state, name)
  return state.new[name] or state.old[name]
end

function packed.put(state, name, record)
  if not state.old[name] and not state.new[name] then
    state.order[#state.order + 1] = name
  end
  state.new[name] = record
  state.changed = true
end

-- Write the records that are still live. life(record, period, now) is how
-- many more microseconds a record must be kept; 0 or less, and it goes.
function packed.store(state, now, life)
  if not state.changed then
    return
  end
  local parts, longest = {}, 0
  for _, name in ipairs(state.order) do
    local record = state.new[name] or state.old[name]
    local left = life(record, tonumber(name) * 1000000, now)
    if left > 0 then
      parts[#parts + 1] = name .. '=' .. record
      if left > longest then
        longest = left
      end
    end
  end
  if #parts == 0 then
    redis.call('DEL', state.key)
  else
    redis.call('SET', state.key, table.concat(parts, ' '), 'PX', math.ceil(longest / 1000) + 1000)
  end
end
