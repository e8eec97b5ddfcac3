-- Reads the index of limiters with a document, bounded: an index over the
-- bound (written by hand or by another SDK) is answered by its size, never
-- by its members, so a reader's memory and the scripts it then runs on
-- every member stay bounded.
--
-- KEYS[1]   index: set of limiters with a document
-- ARGV[1]   the most members to send (rulestore.MaxLimiters)
-- ARGV[2]   the longest member to send, in bytes (the longest limiter name):
--           a longer one, written by hand, is no limiter's and is counted,
--           never sent (GC removes it)
--
-- Returns {-1, type} when the key is of another Redis type than a set
-- (written by hand or by a foreign tool), {size} when the index holds more
-- than ARGV[1] members, otherwise {size, longer, member...}, longer counting
-- the members not sent.

local t = redis.call('TYPE', KEYS[1])
if type(t) == 'table' then t = t.ok end
if t ~= 'set' and t ~= 'none' then
  return {-1, t}
end
local n = redis.call('SCARD', KEYS[1])
if n > tonumber(ARGV[1]) then
  return {n}
end
local max = tonumber(ARGV[2])
local out, longer = {n, 0}, 0
for _, m in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if #m > max then
    longer = longer + 1
  else
    out[#out + 1] = m
  end
end
out[2] = longer
return out
