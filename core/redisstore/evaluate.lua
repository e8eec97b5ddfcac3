-- evaluate.lua: apply a check's ops in order (ratelimit.Store.Eval semantics).
--
-- KEYS[2i-1], KEYS[2i]: counter (or set) key and ban key of op i; the ban key
--   repeats the counter key when the op has no ban.
-- ARGV[1]: "0" check, "1" peek.
-- ARGV[2i]: "<kind> <flags> <limit> <period_ms> <ban_ms> <cost>" of op i, where
--   kind is 0 (count) or 1 (distinct) and flags is 1 (terminal) + 2 (has ban key).
-- ARGV[2i+1]: the member of a distinct op ("" otherwise).
--
-- Returns three values per evaluated op, stopping after an exceeded terminal op:
--   count: the counter as Redis stores it (a string: Lua numbers would be
--          truncated to integers) or the set size;
--   ttl:   milliseconds left in the window, or in the ban when banned; the
--          period when the key does not exist;
--   bits:  1 banned, 2 exceeded.
--
-- Windows run on Redis's clock: a window is the key's TTL, set on the first
-- write and never extended.
local peek = ARGV[1] == '1'
local out = {}
for i = 1, #KEYS / 2 do
  local key, bankey = KEYS[2 * i - 1], KEYS[2 * i]
  local kind, flags, limit, period, banfor, cost =
    string.match(ARGV[2 * i], '^(%d) (%d+) (%S+) (%d+) (%d+) (%S+)$')
  if not kind then
    return redis.error_reply('ERR ratekit: bad op spec ' .. tostring(ARGV[2 * i]))
  end
  flags, limit, period, banfor = tonumber(flags), tonumber(limit), tonumber(period), tonumber(banfor)
  local costn = tonumber(cost)
  local terminal = flags % 2 == 1
  local hasban = flags >= 2
  local distinct = kind == '1'
  local count, ttl, bits = '0', period, 0

  local pttl = redis.call('PTTL', key)
  if pttl ~= -2 then
    -- Keys encode the counting kind, so a value of the other type is foreign
    -- (an older version's key, a hand-written one): replace it with a fresh
    -- counter rather than fail every check with WRONGTYPE.
    local t = redis.call('TYPE', key)['ok']
    if (distinct and t ~= 'set') or (not distinct and t ~= 'string') then
      if not peek then redis.call('DEL', key) end
      pttl = -2
    end
  end
  local bttl = -2
  if hasban then
    bttl = redis.call('PTTL', bankey)
  end
  if bttl ~= -2 then
    -- An active ban: exceeded, not charged, reset at the ban's end.
    if pttl ~= -2 then
      if distinct then
        count = redis.call('SCARD', key)
      else
        count = redis.call('GET', key)
      end
    end
    if bttl < 0 then bttl = 0 end
    ttl, bits = bttl, 3
  else
    local charge = not peek and costn > 0
    local would
    if distinct then
      local n = 0
      if charge then
        if pttl ~= -2 then n = redis.call('SCARD', key) end
        -- A set already over its limit stays exceeded whatever is added, so it
        -- stops growing: a client cannot inflate it past limit + 1 members.
        if n <= limit then
          n = n + redis.call('SADD', key, ARGV[2 * i + 1])
          would = n
        else
          would = n + 1 - redis.call('SISMEMBER', key, ARGV[2 * i + 1])
        end
      else
        if pttl ~= -2 then n = redis.call('SCARD', key) end
        would = n
        if peek and costn > 0 and (pttl == -2 or redis.call('SISMEMBER', key, ARGV[2 * i + 1]) == 0) then
          would = n + 1
        end
      end
      count = n
    else
      if charge then
        count = redis.call('INCRBYFLOAT', key, cost)
        would = tonumber(count)
      else
        if pttl ~= -2 then count = redis.call('GET', key) or '0' end
        would = tonumber(count)
        if peek then would = would + costn end
      end
    end
    if charge then
      if pttl < 0 then
        redis.call('PEXPIRE', key, period) -- first write: the window starts
      else
        ttl = pttl
      end
    elseif pttl >= 0 then
      ttl = pttl
    end
    if would > limit then
      bits = bits + 2
      if charge and hasban and banfor > 0 then
        redis.call('SET', bankey, '1', 'PX', banfor)
        ttl, bits = banfor, bits + 1
      end
    end
  end
  out[#out + 1] = count
  out[#out + 1] = ttl
  out[#out + 1] = bits
  if terminal and bits % 4 >= 2 then
    break
  end
end
return out
