-- Penalties: an identity that keeps hitting a limit is blocked for an
-- escalating time. The loader puts this file before main.lua, which calls
-- penalties.load() before it checks the layers and penalties.punish() when
-- it refuses a request.
--
-- A plan entry with a penalty (its first block, factor and longest block,
-- whole seconds for the blocks) has one more key, its penalty key, in the identity's
-- {hash tag} like its counters; the penalty keys follow the entries' keys,
-- in the order of the entries. The value is "<level>:<until>": how many
-- offences in a row, and when the current block ends, in microseconds.
--
-- While a block lasts, the entry's layers refuse every request, with the
-- block's end as their retry; such refusals are not offences. A refusal by
-- one of its layers on their own is an offence: the level goes up by one
-- (from 0 once the key has expired) and the entry is blocked from now for
-- min(first * factor ^ (level - 1), longest). The key lives until the block
-- ends plus the longest block, so memory is bounded and a level is forgotten
-- after that long without offence.

local penalties = {}

-- The penalty groups, one per punished entry ({first, last, penalty}: its
-- first and last layer, and its penalty's three numbers), and the wait of every layer
-- that is blocked now. `keys` is how many keys the entries have.
function penalties.load(punished, keys, now)
  local groups, blocked = {}, {}
  for j, entry in ipairs(punished) do
    local first, factor, longest = unpack(entry.penalty)
    local group = {
      key = KEYS[keys + j],
      first = entry.first,
      last = entry.last,
      base = first * 1000000,
      factor = factor,
      longest = longest * 1000000,
      level = 0,
      blocked = false,
    }
    local value = redis.call('GET', group.key)
    if value then
      local level, ends = string.match(value, '^(%d+):(%d+)$')
      if level then
        local wait = tonumber(ends) - now
        -- The level is forgotten a longest block after the block's end; the
        -- key's TTL says the same on Redis's clock, this on the script's.
        if wait > -group.longest then
          group.level = tonumber(level)
        end
        if wait > 0 then
          group.blocked = true
          for i = group.first, group.last do
            blocked[i] = math.max(blocked[i] or 0, wait)
          end
        end
      end
    end
    groups[j] = group
  end
  return groups, blocked
end
-- Block every group that is not blocked yet and has a counter in `missed`.
-- Returns the first missed counter of the longest new block, and its wait
-- (0 and -1 if none).
function penalties.punish(groups, missed, now)
  local pick, longest = 0, -1
  for _, group in ipairs(groups) do
    local offender = nil
    if not group.blocked then
      for i = group.first, group.last do
        if missed[i] and not offender then
          offender = i
        end
      end
    end
    if offender then
      local level = group.level + 1
      local block = group.base
      for _ = 2, level do
        if block >= group.longest or group.factor <= 1 then
          break
        end
        block = block * group.factor
      end
      block = math.min(block, group.longest)
      redis.call('SET', group.key, string.format('%d:%.0f', level, now + block),
        'PX', math.ceil((block + group.longest) / 1000))
      if block > longest then
        pick, longest = offender, block
      end
    end
  end
  return pick, longest
end
