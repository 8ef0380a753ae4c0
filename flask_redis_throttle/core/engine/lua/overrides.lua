-- One change of the overrides (see overrides.py, OverrideStore): the
-- fields it sets or removes, a new version, the overrides whose time has
-- passed dropped, the hash's expiry at its last override's end, and a log
-- entry per change, all in one step. Everything that can fail (a key of
-- the wrong type) is read before anything is written, so a change is made
-- whole or not at all.
--
-- KEYS: the hash, the log.
-- ARGV: now (seconds since the epoch), the new version, the log's size,
-- who, what ('set' or 'removed'), the longest an override may last (in
-- seconds); then, for 'set', the field, its value, the override in words
-- and its end; for 'removed', the field and the override in words of each.
-- Reply: for 'set', 1; for 'removed', 1 or 0 per field: whether it was
-- there to remove.
local hash, log = KEYS[1], KEYS[2]
local now, version, size, by, what = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local latest = now + tonumber(ARGV[6])

local stream = redis.call('TYPE', log)
stream = type(stream) == 'table' and stream.ok or stream
if stream ~= 'none' and stream ~= 'stream' then
  return redis.error_reply('WRONGTYPE the log of changes, ' .. log .. ', is not a stream')
end
local stored = redis.call('HGETALL', hash)

local changed = {}
for n = 7, #ARGV, what == 'set' and 4 or 2 do
  changed[ARGV[n]] = true
end
-- The end of each override the change leaves in place, as its JSON holds
-- it; a field with none that reads (another version's) is left alone.
local found, stale, last = {}, {}, nil
for n = 1, #stored, 2 do
  local name, value = stored[n], stored[n + 1]
  found[name] = true
  if name ~= '~version' and not changed[name] then
    local ends = tonumber(string.match(value, '"until": *(-?[%d.]+[eE]?[-+]?%d*)'))
    if ends ~= nil then
      if ends <= now then
        stale[#stale + 1] = name
      elseif last == nil or ends > last then
        last = ends
      end
    end
  end
end

local reply, entries = {}, {}
if what == 'set' then
  local ends = tonumber(ARGV[10])
  redis.call('HSET', hash, ARGV[7], ARGV[8])
  if last == nil or ends > last then
    last = ends
  end
  reply = 1
  entries[1] = {ARGV[9], ARGV[10]}
else
  for n = 7, #ARGV, 2 do
    if found[ARGV[n]] then
      redis.call('HDEL', hash, ARGV[n])
      entries[#entries + 1] = {ARGV[n + 1]}
    end
    reply[#reply + 1] = found[ARGV[n]] and 1 or 0
  end
  if #entries == 0 then
    return reply -- nothing was there: nothing changes, nor is logged
  end
end
redis.call('HSET', hash, '~version', version)
-- In slices: Lua's unpack() gives at most some 8,000 values.
for n = 1, #stale, 1000 do
  redis.call('HDEL', hash, unpack(stale, n, math.min(n + 999, #stale)))
end
-- With no override left, the version stays a minute, for readers to see
-- the change; an end stored past the bound (by hand, or by an older
-- version) keeps the hash no longer than the bound.
last = math.min(last or now + 60, latest)
redis.call('PEXPIREAT', hash, string.format('%.0f', math.ceil(last * 1000)))
for _, entry in ipairs(entries) do
  if entry[2] then
    redis.call('XADD', log, 'MAXLEN', '~', size, '*', 'time', ARGV[1], 'by', by, 'what', what,
      'override', entry[1], 'until', entry[2])
  else
    redis.call('XADD', log, 'MAXLEN', '~', size, '*', 'time', ARGV[1], 'by', by, 'what', what,
      'override', entry[1])
  end
end
return reply
