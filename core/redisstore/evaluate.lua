-- evaluate.lua: apply a check's ops in order (ratelimit.Store.Eval semantics).
--
-- KEYS: each op's counter (or set) key, followed by its ban key when it has a
--   ban.
-- ARGV: each op's code, followed by its fields. The code says which fields:
--   'n', 't': a counter charged with a whole positive cost, without a ban, in
--            a check (the usual op); 't' when terminal. Fields: limit,
--            period_ms, cost.
--   'b', 'B': the same with a ban (its key follows the counter's in KEYS);
--            'B' when terminal. Fields: limit, period_ms, ban_ms, cost.
--   'g<kind><flags><peek>': any op. kind is 0 (count), 1 (distinct), 2
--            (sliding window) or 3 (token bucket); flags is 1 (terminal) + 2
--            (has a ban key); peek is 1 in a peek, 0 in a check. Fields:
--            limit, period_ms, ban_ms, cost, member (of a distinct op; the
--            burst of a token bucket; "" otherwise).
--
-- Returns three values per evaluated op, stopping after an exceeded terminal op:
--   count: the counter (an integer, or a string when fractional: Lua numbers
--          would be truncated to integers) or the set size;
--   ttl:   milliseconds left in the window, or in the ban when banned; the
--          period when the key does not exist;
--   bits:  1 banned, 2 exceeded.
--
-- Windows run on Redis's clock: a window is the key's TTL, set on the first
-- write and never extended. The sliding window and token bucket keep their
-- time in their key's TTL too (see algorithm below), never as a timestamp,
-- so that a key means the same whatever the clock of the server reading it.
--
-- The script runs on every check of a go-redis client (Dial sends the usual
-- check as plain commands instead, see plain.go), so the usual op costs the
-- fewest commands (INCRBY and PTTL, and PEXPIRE on its first write) and the
-- least Lua: its fields are separate arguments compared or converted only
-- when used, with no pattern matching, and the general code below is not even
-- defined unless an op needs it.

local general -- function(key, bankey, kind, terminal, hasban, peek, limit, period, banfor, cost, member)

local function define()
  -- Keys encode the counting kind, so a value of another type is foreign (an
  -- older version's key, a hand-written one): it is replaced with a fresh
  -- counter rather than failing every check with WRONGTYPE; a peek, which
  -- writes nothing, treats it as absent. foreign is called after a command on
  -- key failed (which wrote nothing) and reports whether that was the reason.
  local function foreign(key, want, peek)
    if redis.call('TYPE', key)['ok'] == want then
      return false
    end
    if not peek then redis.call('DEL', key) end
    return true
  end

  -- read returns the reply of GET or SCARD on key, or nil when key holds a
  -- foreign value (the one way these commands fail).
  local function read(cmd, key, want, peek)
    local r = redis.pcall(cmd, key)
    if type(r) == 'table' then
      if foreign(key, want, peek) then return nil end
      return redis.call(cmd, key)
    end
    return r
  end

  general = function(key, bankey, distinct, hasban, peek, limit, period, banfor, cost, member)
    local count, ttl, bits = 0, nil, 0
    local bttl = -2
    if hasban then
      bttl = redis.call('PTTL', bankey)
    end
    if bttl ~= -2 then
      -- An active ban: exceeded, not charged, reset at the ban's end.
      if distinct then
        local n = read('SCARD', key, 'set', peek)
        if n and n > 0 then count = n end
      else
        count = read('GET', key, 'string', peek) or 0
      end
      if bttl < 0 then bttl = 0 end
      return count, bttl, 3
    end
    limit = tonumber(limit)
    local costn = tonumber(cost)
    local charge = not peek and costn > 0
    local would
    if charge then
      if distinct then
        local n = read('SCARD', key, 'set', peek) or 0
        -- A set already over its limit stays exceeded whatever is added, so it
        -- stops growing: a client cannot inflate it past limit + 1 members.
        if n <= limit then
          n = n + redis.call('SADD', key, member)
          would = n
        else
          would = n + 1 - redis.call('SISMEMBER', key, member)
        end
        count = n
      else
        -- INCRBY is several times cheaper than INCRBYFLOAT and exact, but it
        -- takes whole costs and whole counters only: anything else (a
        -- fractional cost now or before, a foreign value) takes INCRBYFLOAT.
        local r
        if string.find(cost, '^[1-9]%d*$') then
          r = redis.pcall('INCRBY', key, cost)
        end
        if type(r) == 'number' then
          count, would = r, r
        else
          r = redis.pcall('INCRBYFLOAT', key, cost)
          if type(r) == 'table' then
            foreign(key, 'string', peek)
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
      local pttl = redis.call('PTTL', key)
      local n
      if pttl ~= -2 then
        if distinct then
          n = read('SCARD', key, 'set', peek)
        else
          n = read('GET', key, 'string', peek)
        end
        if n == nil then pttl = -2 end
      end
      if distinct then
        n = n or 0
        would = n
        if peek and costn > 0 and (pttl == -2 or redis.call('SISMEMBER', key, member) == 0) then
          would = n + 1
        end
        count = n
      else
        count = n or 0
        would = tonumber(count)
        if peek then would = would + costn end
      end
      if pttl >= 0 then ttl = pttl end
    end
    if would > limit then
      bits = 2
      if charge and hasban then
        banfor = tonumber(banfor)
        if banfor > 0 then
          redis.call('SET', bankey, '1', 'PX', banfor)
          ttl, bits = banfor, 3
        end
      end
    end
    return count, ttl or tonumber(period), bits
  end
end

local algorithm -- function(key, bankey, bucket, hasban, peek, limit, period, banfor, cost, burst)

-- defineAlgorithm defines algorithm: a sliding window or token bucket op,
-- with the formulas of the memory store (core/memory_algo.go), in
-- milliseconds. Neither charges an exceeded op; an exceeded op's ttl is the
-- time until the same op would pass.
--
-- A sliding window is a hash {c: this window's count, p: the previous
-- window's} whose TTL runs to one period after this window's end: a TTL
-- over the period means this window is on, one within it that this window
-- ended (its count is now the previous one), none that both are gone.
-- A token bucket (GCRA) is a string whose TTL runs to when the bucket is full
-- again, rounded up to a millisecond; its value is what the rounding added.
local function defineAlgorithm()
  local function fmt(n)
    if n == math.floor(n) and n < 2^53 then return n end
    return string.format('%.17g', n) -- a reply number would be truncated
  end
  -- value returns the reply of cmd or, when the key holds a foreign value
  -- (a hand-written one: keys encode the algorithm), nil after deleting it
  -- in a check.
  local function value(peek, ...)
    local r = redis.pcall(...)
    if type(r) == 'table' and r['err'] then
      if not peek then redis.call('DEL', (select(2, ...))) end
      return nil
    end
    return r
  end

  algorithm = function(key, bankey, bucket, hasban, peek, limit, period, banfor, cost, burst)
    limit, period = tonumber(limit), tonumber(period)
    local costn = tonumber(cost)
    local bttl = -2
    if hasban then bttl = redis.call('PTTL', bankey) end
    local charge = not peek and costn > 0 and bttl == -2
    local pttl = redis.call('PTTL', key)
    local before, count, ttl, exceeded
    if bucket then
      burst = tonumber(burst)
      local d = 0
      if pttl > 0 then
        d = pttl - (tonumber(value(peek, 'GET', key)) or pttl)
        if d < 0 then d = 0 end
      end
      if limit <= 0 or burst <= 0 then -- a limit of 0 denies all
        before, count, ttl, exceeded = 0, 0, period, costn > 0
      else
        local t = period / limit
        before = d / t
        if before + costn <= burst + 1e-9 then
          count, ttl, exceeded = before + costn, d + costn * t, false
          if charge then
            local ms = math.max(math.ceil(ttl), 1)
            redis.call('SET', key, fmt(ms - ttl), 'PX', ms)
          elseif bttl == -2 then
            ttl = d -- not charged: full again when it was going to be
          end
        else
          count, ttl, exceeded = before, d + costn * t - burst * t, true
        end
      end
    else
      local cur, prev, rem, fresh = 0, 0, period, true
      if pttl > period then
        local v = value(peek, 'HMGET', key, 'c', 'p')
        if v then cur, prev, rem, fresh = tonumber(v[1]) or 0, tonumber(v[2]) or 0, pttl - period, false end
      elseif pttl > 0 then
        prev, rem = tonumber(value(peek, 'HGET', key, 'c')) or 0, pttl
      end
      before = prev * rem / period + cur
      count, ttl, exceeded = before, rem, false
      if before + costn <= limit then
        if charge then
          count = before + costn
          if fresh then
            redis.call('HSET', key, 'c', cur + costn, 'p', prev)
            redis.call('PEXPIRE', key, rem + period)
          else
            redis.call('HINCRBYFLOAT', key, 'c', cost)
          end
        end
      else
        exceeded = true
        if prev > 0 and limit - cur - costn >= 0 then
          ttl = rem - (limit - cur - costn) * period / prev
        elseif costn > limit then
          ttl = rem + period
        elseif cur > limit - costn then
          ttl = rem + period * (1 - (limit - costn) / cur)
        end
      end
    end
    if bttl ~= -2 then
      if bttl < 0 then bttl = 0 end
      return fmt(before), bttl, 3
    end
    if not charge then count = before end
    local bits = 0
    if exceeded then
      bits = 2
      banfor = tonumber(banfor)
      if not peek and costn > 0 and hasban and banfor > 0 then
        redis.call('SET', bankey, '1', 'PX', banfor)
        ttl, bits = banfor, 3
      end
    end
    if ttl < 0 then ttl = 0 end
    return fmt(count), math.ceil(ttl), bits
  end
end

local out, nout, k, a = nil, 0, 1, 1
while ARGV[a] do
  local code, key = ARGV[a], KEYS[k]
  local count, ttl, bits, terminal
  if code == 'n' or code == 't' then
    terminal = code == 't'
    local period = ARGV[a + 2]
    local r = redis.pcall('INCRBY', key, ARGV[a + 3])
    if type(r) == 'number' then
      local pttl = redis.call('PTTL', key)
      if pttl == -1 then
        redis.call('PEXPIRE', key, period) -- first write: the window starts
        pttl = tonumber(period)
      end
      count, ttl, bits = r, pttl, 0
      if r > tonumber(ARGV[a + 1]) then bits = 2 end
    else -- a fractional or foreign value: INCRBY wrote nothing
      if not general then define() end
      count, ttl, bits = general(key, nil, false, false, false, ARGV[a + 1], period, '0', ARGV[a + 3], '')
    end
    k, a = k + 1, a + 4
  elseif code == 'b' or code == 'B' then
    -- The usual banning op (a login counter): the ban, then the counter,
    -- without the general code. Anything unusual (a fractional or foreign
    -- value) takes the general code, which wrote nothing meanwhile.
    terminal = code == 'B'
    local bankey, period = KEYS[k + 1], ARGV[a + 2]
    local bttl = redis.call('PTTL', bankey)
    local r
    if bttl ~= -2 then
      r = redis.pcall('GET', key)
      if type(r) ~= 'table' then
        if bttl < 0 then bttl = 0 end
        count, ttl, bits = r or 0, bttl, 3
      end
    else
      r = redis.pcall('INCRBY', key, ARGV[a + 4])
      if type(r) == 'number' then
        local pttl = redis.call('PTTL', key)
        if pttl == -1 then
          redis.call('PEXPIRE', key, period) -- first write: the window starts
          pttl = tonumber(period)
        end
        count, ttl, bits = r, pttl, 0
        if r > tonumber(ARGV[a + 1]) then
          bits = 2
          local banfor = tonumber(ARGV[a + 3])
          if banfor > 0 then
            redis.call('SET', bankey, '1', 'PX', banfor)
            ttl, bits = banfor, 3
          end
        end
      end
    end
    if type(r) == 'table' then
      if not general then define() end
      count, ttl, bits = general(key, bankey, false, true, false, ARGV[a + 1], period, ARGV[a + 3], ARGV[a + 4], '')
    end
    k, a = k + 2, a + 5
  else
    local kind, flags, peek = string.byte(code, 2, 4)
    if code:sub(1, 1) ~= 'g' or not peek then
      return redis.error_reply('ERR ratekit: bad op code ' .. code)
    end
    flags = flags - 48
    terminal = flags % 2 == 1
    local hasban = flags >= 2
    local bankey = key
    if hasban then bankey = KEYS[k + 1]; k = k + 2 else k = k + 1 end
    if kind >= 50 then
      if not algorithm then defineAlgorithm() end
      count, ttl, bits = algorithm(key, bankey, kind == 51, hasban, peek == 49,
        ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5])
    else
      if not general then define() end
      count, ttl, bits = general(key, bankey, kind == 49, hasban, peek == 49,
        ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5])
    end
    a = a + 6
  end
  if nout == 0 then
    out = {count, ttl, bits} -- sized at once: most checks are one op
  else
    out[nout + 1], out[nout + 2], out[nout + 3] = count, ttl, bits
  end
  nout = nout + 3
  if terminal and bits >= 2 then
    break
  end
end
return out or {}
