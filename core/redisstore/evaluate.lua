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
--
-- The script runs on every check, so the usual cases are kept to the fewest
-- commands: a counter charged with a whole cost is INCRBY and PTTL (and
-- PEXPIRE on its first write), a rule without a ban never looks for one, and
-- a key's type is asked only after a command on it failed.
local peek = ARGV[1] == '1'

-- Keys encode the counting kind, so a value of another type is foreign (an
-- older version's key, a hand-written one): it is replaced with a fresh
-- counter rather than failing every check with WRONGTYPE; a peek, which
-- writes nothing, treats it as absent. foreign is called after a command on
-- key failed (which wrote nothing) and reports whether that was the reason.
local function foreign(key, want)
  if redis.call('TYPE', key)['ok'] == want then
    return false
  end
  if not peek then redis.call('DEL', key) end
  return true
end

-- read returns the reply of GET or SCARD on key, or nil when key holds a
-- foreign value (the one way these commands fail).
local function read(cmd, key, want)
  local r = redis.pcall(cmd, key)
  if type(r) == 'table' then
    if foreign(key, want) then return nil end
    return redis.call(cmd, key)
  end
  return r
end

local out, nout = {}, 0
for i = 1, #KEYS / 2 do
  local key = KEYS[2 * i - 1]
  local kind, flags, limit, period, banfor, cost =
    string.match(ARGV[2 * i], '^(%d) (%d+) (%S+) (%d+) (%d+) (%S+)$')
  if not kind then
    return redis.error_reply('ERR ratekit: bad op spec ' .. tostring(ARGV[2 * i]))
  end
  -- tonumber is dear (strtod), so the usual fields are compared as strings and
  -- the others converted only when used.
  local terminal, hasban
  if flags == '0' or flags == '1' or flags == '2' or flags == '3' then
    terminal, hasban = flags == '1' or flags == '3', flags == '2' or flags == '3'
  else
    flags = tonumber(flags)
    terminal, hasban = flags % 2 == 1, flags >= 2
  end
  -- A whole positive cost, which INCRBY takes.
  local whole = string.find(cost, '^[1-9]%d*$') ~= nil
  local distinct = kind == '1'
  local count, ttl, bits = '0', nil, 0

  local bttl = -2
  if hasban then
    bttl = redis.call('PTTL', KEYS[2 * i])
  end
  if bttl ~= -2 then
    -- An active ban: exceeded, not charged, reset at the ban's end.
    if distinct then
      local n = read('SCARD', key, 'set')
      if n and n > 0 then count = n end
    else
      count = read('GET', key, 'string') or '0'
    end
    if bttl < 0 then bttl = 0 end
    ttl, bits = bttl, 3
  else
    limit = tonumber(limit)
    local charge = not peek and (whole or tonumber(cost) > 0)
    local would
    if charge then
      if distinct then
        local n = read('SCARD', key, 'set') or 0
        -- A set already over its limit stays exceeded whatever is added, so it
        -- stops growing: a client cannot inflate it past limit + 1 members.
        if n <= limit then
          n = n + redis.call('SADD', key, ARGV[2 * i + 1])
          would = n
        else
          would = n + 1 - redis.call('SISMEMBER', key, ARGV[2 * i + 1])
        end
        count = n
      else
        -- INCRBY is several times cheaper than INCRBYFLOAT and exact, but it
        -- takes whole costs and whole counters only: anything else (a
        -- fractional cost now or before, a foreign value) takes INCRBYFLOAT.
        local r
        if whole then
          r = redis.pcall('INCRBY', key, cost)
        end
        if type(r) == 'number' then
          count, would = string.format('%.0f', r), r
        else
          r = redis.pcall('INCRBYFLOAT', key, cost)
          if type(r) == 'table' then
            foreign(key, 'string')
            r = redis.call('INCRBYFLOAT', key, cost) -- the error again, unless foreign
          end
          count, would = r, tonumber(r)
        end
      end
      local pttl = redis.call('PTTL', key)
      if pttl >= 0 then
        ttl = pttl
      elseif pttl == -1 then
        redis.call('PEXPIRE', key, period) -- first write: the window starts
      end
    else
      local costn = tonumber(cost)
      local pttl = redis.call('PTTL', key)
      local n
      if pttl ~= -2 then
        if distinct then
          n = read('SCARD', key, 'set')
        else
          n = read('GET', key, 'string')
        end
        if n == nil then pttl = -2 end
      end
      if distinct then
        n = n or 0
        would = n
        if peek and costn > 0 and (pttl == -2 or redis.call('SISMEMBER', key, ARGV[2 * i + 1]) == 0) then
          would = n + 1
        end
        count = n
      else
        count = n or '0'
        would = tonumber(count)
        if peek then would = would + costn end
      end
      if pttl >= 0 then ttl = pttl end
    end
    if would > limit then
      bits = bits + 2
      if charge and hasban then
        banfor = tonumber(banfor)
        if banfor > 0 then
          redis.call('SET', KEYS[2 * i], '1', 'PX', banfor)
          ttl, bits = banfor, bits + 1
        end
      end
    end
  end
  if nout == 0 then
    out = {count, ttl or tonumber(period), bits} -- sized at once: most checks are one op
  else
    out[nout + 1], out[nout + 2], out[nout + 3] = count, ttl or tonumber(period), bits
  end
  nout = nout + 3
  if terminal and bits % 4 >= 2 then
    break
  end
end
return out
