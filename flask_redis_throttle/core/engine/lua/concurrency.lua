-- Concurrency: how many of an identity's requests run at the same time.
-- Each request admitted holds a slot until it ends, kept as a lease in a
-- sorted set: the member is the request's token (ARGV[5]: random, chosen
-- by the extension for each admission, see main.lua), the score when the
-- lease ends, in microseconds. A layer's quota is the cap, and its window
-- the lease, in seconds: the longest a request may hold its slot. A slot
-- is given back by a refund of the request with the same token, which the
-- extension sends when the request ends; a slot whose request never ends
-- (its worker killed) is dropped once its lease has ended, never held for
-- longer.
--
-- A refund may come first: an admission that timed out (Redis stalled) is
-- answered without its slot, and its refund sent at once on another
-- connection; the stalled Redis runs both once it resumes, in either order.
-- A refund that finds no lease of its token leaves a tombstone instead: the
-- token with a negative score, minus when it ends (now + the lease), which
-- the set's leases do not count, and which makes an admission with that
-- token take no slot. Both end with the lease, and every add() drops those
-- that have: a lease ended when its score is at most now, a tombstone when
-- its score is at least -now.
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

-- The longest a set is kept, in microseconds: a layer's longest window. A
-- score past it is not ours (written by hand, or corrupt, even infinite),
-- and must not make a time that Redis reads as negative, which would
-- delete the set.
local LONGEST = 4294967295 * SECOND

-- Keep the set until its last lease and its last tombstone have ended, and
-- a second.
local function keep(key, now)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  local ends = max(tonumber(last[2]), -tonumber(first[2]))
  redis.call('PEXPIRE', key, format('%d', math.ceil(math.min(max(ends - now, 0), LONGEST) / 1000) + 1000))
end

-- Add the lease of `token`, `life` microseconds from `now`, once the ended
-- leases and tombstones are gone; none if the token has one already, or a
-- tombstone: its refund came first.
local function add(now, key, life, token)
  redis.call('ZREMRANGEBYSCORE', key, format('%d', -now), format('%d', now))
  if redis.call('ZSCORE', key, token) then
    return
  end
  redis.call('ZADD', key, format('%d', now + life), token)
  keep(key, now)
end

-- Give back the lease of `token`, or, when it has none (not admitted yet,
-- or its lease has ended), leave its tombstone, which ends with a lease of
-- `life` from `now`.
local function remove(now, key, life, token)
  local score = redis.call('ZSCORE', key, token)
  if not score then
    redis.call('ZADD', key, format('%d', -(now + life)), token)
    keep(key, now)
  elseif tonumber(score) > 0 then
    redis.call('ZREM', key, token)
  end
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

  -- The slot is given back by store(), which needs the lease for a tombstone.
  refund = function(_, _, _, name)
    return '', name * SECOND
  end,

  store = function(now, cost, key, _, life, _, token)
    if cost > 0 then
      add(now, key, life, token)
    else
      remove(now, key, life, token)
    end
  end,
}
