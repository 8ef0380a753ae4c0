-- Concurrency: how many of an identity's requests run at the same time.
-- Each request admitted holds a slot until it ends, kept as a lease in a
-- sorted set: the score is when the lease ends, in microseconds, and the
-- member "<end>:<number>", numbered on from the leases that end at the same
-- microsecond. A layer's quota is the cap, and its window the lease, in
-- seconds: the longest a request may hold its slot. A slot is given back
-- by a refund of the request (a negative cost, at the time it was
-- admitted), which the extension sends when the request ends; a slot whose
-- request never ends (its worker killed) is dropped once its lease has
-- ended, never held for longer.
--
-- A request takes one slot whatever its cost (`unit`: main.lua never finds
-- it over the cap), and one of cost 0 takes none. Checking counts the
-- leases still running and writes nothing; store() drops the ended ones and
-- adds the request's, so that the set never holds more leases than the cap.
--
-- Promise: at most `quota` requests of an identity hold a slot at once. A
-- refused request takes no slot and has no wait to wait for: a slot frees
-- when any request ends, so its retry is a second, a hint.

local format, max, tonumber = string.format, math.max, tonumber
local SECOND = 1000000

-- Remove one lease that ends at `ends` (microseconds), the one numbered
-- highest, so that the numbers of the leases left and of the next ones
-- stay unique.
local function remove(key, ends)
  local stamp = format('%d', ends)
  local highest, member = -1, nil
  for _, found in ipairs(redis.call('ZRANGEBYSCORE', key, stamp, stamp)) do
    local number = tonumber(string.match(found, ':(%d+)$'))
    if number and number > highest then
      highest, member = number, found
    end
  end
  if member then
    redis.call('ZREM', key, member)
  end
end

-- Add a lease of `life` microseconds from `now`, once the ended leases are
-- gone; the set then lives as long as its last lease.
local function add(now, key, life)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now))
  local stamp = format('%d', now + life)
  local number = redis.call('ZCOUNT', key, stamp, stamp) + 1
  redis.call('ZADD', key, stamp, stamp .. ':' .. number)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', key, format('%d', math.ceil((tonumber(last[2]) - now) / 1000) + 1000))
end

return {
  unit = true,

  check = function(now, cost, quota, name, key)
    local held = redis.call('ZCOUNT', key, format('(%d', now), '+inf')
    local lease = name * SECOND
    -- Back to the whole cap, at the latest, when the last lease ends.
    local reset = 0
    if held > 0 then
      local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      reset = max(tonumber(last[2]) - now, 0)
    end
    if cost <= 0 then
      return held < quota, max(quota - held, 0), reset, held < quota and 0 or SECOND
    end
    if held < quota then
      return true, quota - held - 1, max(reset, lease), 0, '', lease
    end
    return false, 0, reset, SECOND
  end,

  -- The slot is given back by store(), which needs the lease to find it.
  refund = function(_, _, _, name)
    return '', name * SECOND
  end,

  store = function(now, cost, key, _, life)
    if cost > 0 then
      add(now, key, life)
    else
      remove(key, now + life)
    end
  end,
}
