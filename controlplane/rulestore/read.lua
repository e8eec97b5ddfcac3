-- Reads documents without ever sending one that no reader would accept: a
-- key of another Redis type or a string over the size bound is answered by
-- what it is, never by its bytes, so a reader's memory is bounded before it
-- parses anything. One reply sends at most ARGV[2] bytes of documents (the
-- first document always, as it is within ARGV[1]): the documents past that
-- are answered by their size, to be read by another call.
--
-- KEYS      the documents
-- ARGV[1]   the largest document to send, in bytes
-- ARGV[2]   the most bytes of documents one reply sends
--
-- Returns two elements per key: {"none", ""} (no key), {"doc", bytes},
-- {"type", the Redis type}, {"size", length in bytes} or {"later", length
-- in bytes} (a document past ARGV[2], and every one after it).

local max = tonumber(ARGV[1])
local budget = tonumber(ARGV[2])
local sent, full = 0, false
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
      if sent > 0 and sent + n > budget then
        full = true
      end
      if full then
        out[#out + 1] = 'later'
        out[#out + 1] = tostring(n)
      else
        sent = sent + n
        out[#out + 1] = 'doc'
        out[#out + 1] = redis.call('GET', key)
      end
    end
  end
end
return out
