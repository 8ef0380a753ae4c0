-- GCRA, flat: the whole request in one pass, for the usual request (see
-- scripts.py for when it runs): every limit uses GCRA, none has a penalty,
-- no two of its keys are the same, and it counts or inspects (a cost of 0
-- or more). It takes the arguments and gives the reply of main.lua, decides
-- exactly as gcra.lua does there (which explains the arithmetic), and reads
-- and writes the same packed records (see packed.lua), so the two can take
-- turns on one key; tests/test_flat.py holds them to that. It builds no
-- table per key or layer and no function: on the hot path, each one costs
-- more than the arithmetic.

local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = time[1] * 1000000 + time[2]
end
local cost = tonumber(ARGV[2])
local find, floor, fmod, format, gmatch, tonumber = string.find, math.floor, math.fmod, string.format, string.gmatch, tonumber

local admitted, layer = true, 0
local pick, pick_remaining, pick_reset, pick_retry = 0, 0, 0, -1
-- The value each key gets if the request is admitted, and its life.
local values, lives = {}, {}
local parts = {}

local e = 0
for entry in gmatch(ARGV[3], '%S+') do
  e = e + 1
  local value = redis.call('GET', KEYS[e])
  value = value and ' ' .. value or ''
  local n, matched, life = 0, 0, 0
  for quota, name in gmatch(entry, '(%d+)/(%d+)') do
    layer = layer + 1
    quota = tonumber(quota)
    local period = name * 1000000
    -- The TAT as (at, part), never before now.
    local at, part = now, 0
    local found = find(value, ' ' .. name .. '=', 1, true)
    if found then
      local _, last, a, p = find(value, '^(%x+):?(%d*)', found + #name + 2)
      if last then
        matched = matched + last - found + 1
        a, p = tonumber(a, 16), tonumber(p) or 0
        if a > now or (a == now and p > 0) then
          at, part = a, p
          if part >= quota then
            at, part = at + 1, 0
          end
        end
      end
    end
    local share = fmod(period, quota)
    local step = (period - share) / quota
    local extra = part + cost * share
    local next_part = fmod(extra, quota)
    local next_at = at + cost * step + (extra - next_part) / quota
    local ahead = next_at - now + (next_part > 0 and 1 or 0)
    local fit, left, reset, retry = ahead <= period, 0, ahead, 0
    if fit then
      left = floor(((period - (next_at - now)) * quota - next_part) / period)
    else
      retry = ahead - period
      left = math.max(floor(((period - (at - now)) * quota - part) / period), 0)
      reset = at - now + (part > 0 and 1 or 0)
    end
    if cost > quota then
      fit, retry = false, period
    end
    if not fit then
      if admitted or retry > pick_retry then
        pick, pick_remaining, pick_reset, pick_retry = layer, left, reset, retry
      end
      admitted = false
    elseif admitted and (pick == 0 or left < pick_remaining or (left == pick_remaining and reset > pick_reset)) then
      pick, pick_remaining, pick_reset, pick_retry = layer, left, reset, retry
    end
    if admitted and cost > 0 then
      n = n + 1
      parts[n] = next_part > 0 and format('%s=%x:%d', name, next_at, next_part) or format('%s=%x', name, next_at)
      if ahead > life then
        life = ahead
      end
    end
  end
  if admitted and cost > 0 then
    if matched ~= #value then
      -- Records other limits that share the scope wrote: kept while live.
      local names = ',' .. string.sub(entry, 3) .. ','
      for name, record in gmatch(value, ' (%d+)=(%S+)') do
        local a, p = string.match(record, '^(%x+):?(%d*)')
        local left = a and tonumber(a, 16) - now + ((tonumber(p) or 0) > 0 and 1 or 0) or 0
        if left > 0 and not find(names, '/' .. name .. ',', 1, true) then
          n = n + 1
          parts[n] = name .. '=' .. record
          if left > life then
            life = left
          end
        end
      end
    end
    values[e], lives[e] = table.concat(parts, ' ', 1, n), life
  end
end

if admitted and cost > 0 then
  for k = 1, e do
    redis.call('SET', KEYS[k], values[k], 'PX', math.ceil(lives[k] / 1000) + 1000)
  end
end
return {admitted and 1 or 0, pick, pick_remaining, math.ceil(pick_reset), math.ceil(pick_retry), now}
