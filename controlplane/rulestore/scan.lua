-- One step of GC's scan for documents the index does not name (written by
-- another SDK or by hand, or left by an index that was replaced): one SCAN
-- of COUNT ARGV[3] on the server that holds the store's keys. The store's
-- prefix has a hash tag on a Cluster (and a Ring), so every key it starts is
-- in the slot of KEYS[1], on the node this script runs on: scanning that
-- node alone finds them all.
--
-- KEYS[1]   index: set of limiters with a document
-- KEYS[2]   the scan's cursor, kept between GC runs
-- ARGV[1]   the cursor to continue from, "" for the one kept in KEYS[2]
--           (0 when there is none, or it holds no cursor SCAN takes, an
--           integer of 0 to 2^64-1: written by hand)
-- ARGV[2]   the MATCH pattern: the prefix, its glob characters escaped, then *
-- ARGV[3]   the SCAN's COUNT
-- ARGV[4]   the prefix's length in bytes
-- ARGV[5]   the longest limiter name in bytes (rulecheck.MaxNameLen)
--
-- Returns {the cursor to continue from ('0': the pass is over), the limiter
-- names of the keys found that the index does not name...}. A key whose
-- name after the prefix is no limiter name (the store's own keys, whose
-- names hold '@', another tool's) is not one.

local cursor = ARGV[1]
if cursor == '' then
  cursor = '0'
  local t = redis.call('TYPE', KEYS[2])
  if type(t) == 'table' then t = t.ok end
  if t == 'string' and redis.call('STRLEN', KEYS[2]) <= 20 then
    local v = redis.call('GET', KEYS[2])
    -- 20 digits may be past 2^64-1, which SCAN refuses: every run would
    -- fail on it (digit strings of one length compare as their numbers)
    if string.match(v, '^%d+$') and (#v < 20 or v <= '18446744073709551615') then
      cursor = v
    end
  end
end
local t = redis.call('TYPE', KEYS[1])
if type(t) == 'table' then t = t.ok end
local indexed = t == 'set' -- an index of another type is replaced by GC
local res = redis.call('SCAN', cursor, 'MATCH', ARGV[2], 'COUNT', tonumber(ARGV[3]))
local from, maxlen = tonumber(ARGV[4]) + 1, tonumber(ARGV[5])
local out = {res[1]}
for _, key in ipairs(res[2]) do
  local name = string.sub(key, from)
  if #name <= maxlen and string.match(name, '^[a-z0-9_]+$') and
      (not indexed or redis.call('SISMEMBER', KEYS[1], name) == 0) then
    out[#out + 1] = name
  end
end
return out
