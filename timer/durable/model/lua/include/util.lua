--[[ util: Redis time, integers as text, grouping ids.
]]

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function istr(x)
  return string.format('%d', x)
end

-- Append `id` to the list groups[k] (ids grouped by bucket number or watch key); the list.
local function push(groups, k, id)
  local g = groups[k]
  if not g then
    g = {}
    groups[k] = g
  end
  g[#g + 1] = id
  return g
end

-- string.byte, sub and char, local: they are called per byte of ids and records.
local sbyte, ssub, schar = string.byte, string.sub, string.char
