-- Reads the orphan marks of the listed limiters, bounded: a mark longer than
-- a time in ms (written by hand; GC counts it as no mark and marks the
-- limiter again) is answered as none, never sent, and so is every mark of a
-- key of another Redis type than a hash (GC replaces it).
--
-- KEYS[1]    orphan marks: hash limiter -> first seen orphaned (Unix ms)
-- ARGV[1]    the longest mark to send, in bytes
-- ARGV[2..]  the limiters
--
-- Returns one element per limiter: its mark, or nil for none.

local t = redis.call('TYPE', KEYS[1])
if type(t) == 'table' then t = t.ok end
local max = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local v = false
  if t == 'hash' and redis.call('HSTRLEN', KEYS[1], ARGV[i]) <= max then
    v = redis.call('HGET', KEYS[1], ARGV[i])
  end
  out[#out + 1] = v
end
return out
