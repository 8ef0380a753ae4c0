-- Penalties: an identity that keeps hitting a limit is blocked for an
-- escalating time. main.lua reads an entry's penalty key before it checks
-- the entry's layers, and blocks the entry when a request is refused.
--
-- A plan entry with a penalty (its first block, factor and longest block,
-- whole seconds for the blocks) has one more key, its penalty key, in the
-- identity's {hash tag} like its counters; the penalty keys follow the
-- entries' keys, in the order of the entries. The value is
-- "<level>:<until>": how many offences in a row, and when the current
-- block ends, in microseconds.
--
-- While a block lasts, the entry's layers refuse every request, with the
-- block's end as their retry; such refusals are not offences. A refusal by
-- one of its layers on their own is an offence: the level goes up by one
-- (from 0 once the key has expired) and the entry is blocked from now for
-- min(first * factor ^ (level - 1), longest). The key lives until the block
-- ends plus the longest block, so memory is bounded and a level is forgotten
-- after that long without offence.

-- The penalty of `key` at `now`, whose longest block is `longest`
-- microseconds: the level of offence, and microseconds until the block
-- ends (0 or less when there is none).
local function penalty_of(key, now, longest)
  local value = redis.call('GET', key)
  if value then
    local level, ends = string.match(value, '^(%d+):(%d+)$')
    if level then
      local wait = tonumber(ends) - now
      -- The level is forgotten a longest block after the block's end; the
      -- key's TTL says the same on Redis's clock, this on the script's.
      if wait > -longest then
        return tonumber(level), wait
      end
      return 0, wait
    end
  end
  return 0, 0
end

-- Block `key` from `now` for the offence after `level`: for `first`
-- microseconds times `factor` per level above 1, at most `longest`.
-- Returns the block, in microseconds.
local function punish(key, now, level, first, factor, longest)
  level = level + 1
  local block = first
  for _ = 2, level do
    if block >= longest or factor <= 1 then
      break
    end
    block = block * factor
  end
  block = math.min(block, longest)
  redis.call('SET', key, string.format('%d:%.0f', level, now + block), 'PX', math.ceil((block + longest) / 1000))
  return block
end
