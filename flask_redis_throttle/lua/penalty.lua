-- Penalties: an identity that keeps hitting a limit is blocked for an
-- escalating time. The loader puts this file before the driver, which calls
-- penalties.load() before it checks the counters and penalties.punish() when
-- it refuses a request.
--
-- A limit with a penalty has one more key per identity, its penalty key, in
-- the identity's {hash tag} like its counters. The value is
-- "<level>:<until>": how many offences in a row, and when the current block
-- ends, in microseconds.
--
-- Calling convention, after the driver's (n counters, their keys first):
--   KEYS[n + j]             the penalty key of group j: one limit and one
--                           identity, whose counters are consecutive
--   ARGV[4 + 2n + 5(j-1)]   the group's first counter, 1-based
--   ARGV[5 + 2n + 5(j-1)]   its last counter
--   ARGV[6 + 2n + 5(j-1)]   the first block, in whole seconds
--   ARGV[7 + 2n + 5(j-1)]   the factor each further block is multiplied by
--   ARGV[8 + 2n + 5(j-1)]   the longest block, in whole seconds; a level is
--                           also remembered for this long after its block
--
-- While a group's block lasts, its counters refuse every request, with the
-- block's end as their retry; such refusals are not offences. A refusal by
-- one of its counters on their own is an offence: the level goes up by one
-- (from 0 once the key has expired) and the group is blocked from now for
-- min(first * factor ^ (level - 1), longest). The key lives until the block
-- ends plus the longest block, so memory is bounded and a level is forgotten
-- after that long without offence.

local penalties = {}

-- The penalty groups, and the wait of every counter that is blocked now.
function penalties.load(counters, now)
  local groups, blocked = {}, {}
  local j = 1
  while KEYS[counters + j] do
    local at = 3 + 2 * counters + 5 * (j - 1)
    local group = {
      key = KEYS[counters + j],
      first = tonumber(ARGV[at + 1]),
      last = tonumber(ARGV[at + 2]),
      base = tonumber(ARGV[at + 3]) * 1000000,
      factor = tonumber(ARGV[at + 4]),
      longest = tonumber(ARGV[at + 5]) * 1000000,
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
    j = j + 1
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
