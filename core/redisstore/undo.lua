-- undo.lua: revert what evaluate.lua wrote for ops that a block in another
-- cluster slot voided (Redis Cluster only; see doc.go).
--
-- KEYS[2i-1], KEYS[2i]: counter (or set) key and ban key of op i, latest op
--   first, so that the op that created a key is undone last.
-- ARGV[2i-1]: "<kind> <bits> <cost>" with kind and bits as evaluate.lua
--   returned them (4 charged, 8 created the key, 16 set the ban).
-- ARGV[2i]: the member of a distinct op.
for i = 1, #KEYS / 2 do
  local key, bankey = KEYS[2 * i - 1], KEYS[2 * i]
  local kind, bits, cost = string.match(ARGV[2 * i - 1], '^(%d) (%d+) (%S+)$')
  if not kind then
    return redis.error_reply('ERR ratekit: bad undo spec ' .. tostring(ARGV[2 * i - 1]))
  end
  bits = tonumber(bits)
  local charged, created, banset = bits % 8 >= 4, bits % 16 >= 8, bits % 32 >= 16
  if charged then
    if kind == '1' then
      -- SREM of the last member deletes the set, as DEL would.
      redis.call('SREM', key, ARGV[2 * i])
    elseif redis.call('EXISTS', key) == 1 then
      -- A key that expired in between needs nothing: its window is gone.
      local v = tonumber(redis.call('INCRBYFLOAT', key, '-' .. cost))
      if created and v <= 0 then
        redis.call('DEL', key)
      end
    end
  end
  if banset then
    redis.call('DEL', bankey)
  end
end
return #KEYS / 2
