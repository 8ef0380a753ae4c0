-- The driver shared by every strategy. The loader puts it after the files of
-- the strategies a request uses; each of those defines two local functions,
-- registered in `strategies` under the strategy's two-letter code:
--
--   check(key, quota, period, now, cost) -> fits, remaining, reset, retry, state
--     fits       true if `cost` more requests fit in this counter now
--     remaining  the quota left: after this request if it fits, else as it is
--     reset      microseconds until the counter is back to its full quota
--     retry      microseconds until `cost` requests would fit (0 if they do);
--                never early, and exact: one microsecond sooner would not do
--     state      whatever record() needs to write the hit
--   record(key, state)
--     writes the admitted hit, always with a TTL
--   refund(key, quota, period, now, cost)
--     gives back `cost` that a request admitted at `now` took, as if it had
--     never been admitted; `now` is the time the admitting call decided at
--
-- check() only reads. Numbers too big for Lua's 14-digit number-to-string
-- conversion (timestamps have 16 digits) are passed to Redis as strings
-- formatted with '%.0f'.
--
-- Calling convention, the same for every strategy:
--   KEYS[i]         one counter per identity and layer; all keys of one
--                   identity share a {hash tag}
--   ARGV[1]         now, in microseconds since the epoch; "" means "read
--                   Redis TIME" (production always sends ""; tests pin time)
--   ARGV[2]         the cost of this request; 0 inspects without writing;
--                   a negative cost refunds -cost to every counter, at the
--                   `now` of ARGV[1], which must be the admitting call's
--   ARGV[3]         the strategy code of each counter, two letters each
--   ARGV[2 + 2i]    the quota of counter i
--   ARGV[3 + 2i]    the window of counter i, in whole seconds
--
-- Every counter is checked before any is written, and nothing is written
-- unless all of them have room: a refused request consumes no quota. A
-- request that costs more than a counter's whole quota never fits; its
-- retry is given as that counter's window.
--
-- Reply, a flat array of integers:
--   [1] 1 if admitted, 0 if refused
--   [2] the deciding counter, as an index into KEYS (1-based): when refused,
--       the full counter whose wait is longest; when admitted, the counter
--       with the least quota left (the later reset breaks ties)
--   [3] the quota that counter has left
--   [4] microseconds until that counter is back to its full quota
--   [5] microseconds until the request would pass (0 when admitted)
--   [6] now: the time it was decided at, for a refund of it later
--   [7] only when penalty keys were sent (see penalty.lua, whose keys and
--       arguments follow the counters'): 1 if the deciding counter refused
--       because of a penalty, else 0
--
-- A refund replies {1, 0, 0, 0, 0, now}.

local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local cost = tonumber(ARGV[2])
local codes = ARGV[3]
-- KEYS holds one counter per two letters of codes; penalty keys follow.
local counters = #codes / 2

local function strategy_of(i)
  return strategies[string.sub(codes, 2 * i - 1, 2 * i)]
end

if cost < 0 then
  for i = 1, counters do
    strategy_of(i).refund(KEYS[i], tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i]) * 1000000, now, -cost)
  end
  return {1, 0, 0, 0, 0, now}
end

local admitted = true
local chosen, states, missed = {}, {}, {}
local pick, pick_remaining, pick_reset, pick_retry = 0, 0, 0, -1
local groups, blocked = nil, {}
if KEYS[counters + 1] then
  groups, blocked = penalties.load(counters, now)
end

for i = 1, counters do
  local key = KEYS[i]
  local strategy = strategy_of(i)
  local quota = tonumber(ARGV[2 + 2 * i])
  local period = tonumber(ARGV[3 + 2 * i]) * 1000000
  local fits, remaining, reset, retry, state = strategy.check(key, quota, period, now, cost)
  if cost > quota then
    fits, retry = false, period
  end
  missed[i] = not fits
  if blocked[i] then
    fits, remaining, retry = false, 0, math.max(retry, blocked[i])
  end
  chosen[i], states[i] = strategy, state
  local better
  if not fits then
    better = admitted or retry > pick_retry
    admitted = false
  elseif admitted then
    better = pick == 0 or remaining < pick_remaining
      or (remaining == pick_remaining and reset > pick_reset)
  end
  if better then
    pick, pick_remaining, pick_reset, pick_retry = i, remaining, reset, retry
  end
end

local penalized = blocked[pick] ~= nil
if not admitted and cost > 0 and groups then
  -- The wait this refusal gives must cover the block it starts.
  local offender, wait = penalties.punish(groups, missed, now)
  if wait > pick_retry then
    pick, pick_remaining, pick_reset, pick_retry, penalized = offender, 0, wait, wait, true
  end
end

if admitted and cost > 0 then
  for i = 1, counters do
    chosen[i].record(KEYS[i], states[i])
  end
end

local reply = {admitted and 1 or 0, pick, pick_remaining, math.ceil(pick_reset), math.ceil(pick_retry), now}
if groups then
  reply[7] = penalized and 1 or 0
end
return reply
