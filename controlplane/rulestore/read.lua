-- Reads documents without ever sending one that no reader would accept: a
-- key of another Redis type or a string over the size bound is answered by
-- what it is, never by its bytes, so a reader's memory is bounded before it
-- parses anything.
--
-- KEYS      the documents
-- ARGV[1]   the largest document to send, in bytes
--
-- Returns two elements per key: {"none", ""} (no key), {"doc", bytes},
-- {"type", the Redis type} or {"size", length in bytes}.

local max = tonumber(ARGV[1])
local out = {}
for _, key in ipairs(KEYS) do
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t.ok end
  if t == 'none' then
    out[#out + 1] = 'none'
    out[#out + 1] = ''
  elseif t ~= 'string' then
    out[#out + 1] = 'type'
    out[#out + 1] = t
  else
    local n = redis.call('STRLEN', key)
    if n > max then
      out[#out + 1] = 'size'
      out[#out + 1] = tostring(n)
    else
      out[#out + 1] = 'doc'
      out[#out + 1] = redis.call('GET', key)
    end
  end
end
return out
