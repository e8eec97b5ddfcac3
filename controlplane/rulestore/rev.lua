-- Reads the revision counter, bounded: a string longer than ARGV[1] bytes
-- (written by hand; no int64 is) is answered by its length, never sent.
--
-- KEYS[1]   the revision counter
-- ARGV[1]   the longest counter to send, in bytes
--
-- Returns {"none", ""} (no key), {"type", the Redis type} (another type
-- than a string), {"size", length in bytes} or {"value", the counter}.

local t = redis.call('TYPE', KEYS[1])
if type(t) == 'table' then t = t.ok end
if t == 'none' then
  return {'none', ''}
elseif t ~= 'string' then
  return {'type', t}
end
local n = redis.call('STRLEN', KEYS[1])
if n > tonumber(ARGV[1]) then
  return {'size', tostring(n)}
end
return {'value', redis.call('GET', KEYS[1])}
