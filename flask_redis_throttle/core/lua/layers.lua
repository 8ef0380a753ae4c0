-- The general script's layer tables, which the strategies' check() fill
-- (see main.lua). Every layer of the request is numbered in the plan's
-- order, from 1: quotas[i], periods[i] (microseconds), and its verdict:
-- fits[i], remaining[i], resets[i], retries[i].

local tonumber = tonumber
-- (Made with room for 8 layers: growing them one by one costs more.)
local quotas, periods = {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}
local fits, remaining = {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}
local resets, retries = {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}
local strategies = {}
