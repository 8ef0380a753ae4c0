-- Fixed window, flat: the whole request in one pass, for the usual request
-- (see scripts.py for when it runs): every limit uses fixed-window, none
-- has a penalty, no two of its keys are the same, and it counts or inspects
-- (a cost of 0 or more). It takes the arguments and gives the reply of
-- main.lua, decides exactly as fixed_window.lua does there, and reads and
-- writes the same packed records (see packed.lua), so the two can take
-- turns on one key; tests/test_flat.py holds them to that. It builds no
-- table per key or layer and no function: on the hot path, each one costs
-- more than the arithmetic.

local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = time[1] * 1000000 + time[2]
end
local cost = tonumber(ARGV[2])
local find, fmod, gmatch, tonumber = string.find, math.fmod, string.gmatch, tonumber

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
    local elapsed = fmod(now, period)
    local window = (now - elapsed) / period
    local reset = period - elapsed
    local used = 0
    local at = find(value, ' ' .. name .. '=', 1, true)
    if at then
      local _, last, counted, count = find(value, '^(%d+):(%d+)', at + #name + 2)
      if last then
        matched = matched + last - at + 1
        if tonumber(counted) == window then
          used, window = tonumber(count), counted
        end
      end
    end
    local fit, left, retry = used + cost <= quota, quota - used, 0
    if fit then
      left = left - cost
    else
      retry = reset
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
      parts[n] = name .. '=' .. window .. ':' .. (used + cost)
      if reset > life then
        life = reset
      end
    end
  end
  if admitted and cost > 0 then
    if matched ~= #value then
      -- Records other limits that share the scope wrote: kept while live.
      local names = ',' .. string.sub(entry, 3) .. ','
      for name, counted, count in gmatch(value, ' (%d+)=(%d+):(%d+)') do
        local left = (counted + 1) * name * 1000000 - now
        if left > 0 and not find(names, '/' .. name .. ',', 1, true) then
          n = n + 1
          parts[n] = name .. '=' .. counted .. ':' .. count
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
