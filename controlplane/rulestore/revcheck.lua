-- revcheck.lua is put before gc.lua and write.lua, which both count the
-- revision.

-- rev_usable reports whether the revision counter at key is absent or holds
-- an integer INCR takes. The scripts ask before they write anything, as
-- Redis keeps what a script wrote before it fails: a counter that holds no
-- integer (written by hand or by another SDK) starts again from 0, as in a
-- flushed store, rather than failing the write half done.
local function rev_usable(key)
  local t = redis.call('TYPE', key)
  if type(t) == 'table' then t = t.ok end
  if t == 'string' then
    return redis.call('STRLEN', key) <= 18 and string.match(redis.call('GET', key), '^%d+$') ~= nil
  end
  return t == 'none'
end
