--[[ heap: a max-heap of numbers in h[1..n], for the scripts that keep the soonest k of
many deadlines (pending_page.lua, pending_head.lua): h[1] is the latest of them, so a
deadline after it is turned away with one comparison.
]]

-- The max-heap h[1..n] after its top was replaced: the top sifted down to its place.
local function sift_down(h, n)
  local i, v = 1, h[1]
  while true do
    local c = i + i
    if c > n then break end
    if c < n and h[c + 1] > h[c] then c = c + 1 end
    if h[c] <= v then break end
    h[i] = h[c]
    i = c
  end
  h[i] = v
end

-- The max-heap h[1..n] after h[n] was added: it sifted up to its place.
local function sift_up(h, n)
  local i, v = n, h[n]
  while i > 1 do
    local p = (i - i % 2) / 2
    if h[p] >= v then break end
    h[i] = h[p]
    i = p
  end
  h[i] = v
end
