-- Reads the index of limiters with a document, bounded: an index over the
-- bound (written by hand or by another SDK) is answered by its size, never
-- by its members, so a reader's memory and the scripts it then runs on
-- every member stay bounded.
--
-- KEYS[1]   index: set of limiters with a document
-- ARGV[1]   the most members to send (rulestore.MaxLimiters)
--
-- Returns {size} when the index holds more than ARGV[1] members, otherwise
-- {size, member...}.

local n = redis.call('SCARD', KEYS[1])
if n > tonumber(ARGV[1]) then
  return {n}
end
local out = {n}
for _, m in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  out[#out + 1] = m
end
return out
