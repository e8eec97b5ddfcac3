-- evaluate.lua: apply a check's ops in order (ratelimit.Store.Eval semantics).
--
-- KEYS: each op's counter (or set) key, followed by its ban key when it has a
--   ban.
-- ARGV: each op's code, followed by its fields. The code says which fields.
--   The short forms, for the usual ops of a check (no peek) charged with a
--   whole positive cost; the capital letter when the op is terminal:
--   'n', 't': a fixed-window counter without a ban. Fields: limit,
--            period_ms, cost.
--   'b', 'B': the same with a ban (its key follows the counter's in KEYS).
--            Fields: limit, period_ms, ban_ms, cost.
--   'w', 'W': a sliding window without a ban. Fields: limit (> 0),
--            period_ms, cost.
--   'x', 'X': the same with a ban. Fields: limit (> 0), period_ms, ban_ms,
--            cost.
--   'k', 'K': a token bucket without a ban. Fields: limit (> 0), period_ms,
--            cost, burst (>= cost), then what a full bucket's key becomes when
--            the op passes: its TTL in ms (ceil(cost * period_ms / limit),
--            at least 1) and the fraction of a ms that TTL was rounded up by
--            (its value), which the client computes as the script would.
--   'y', 'Y': the same with a ban. Fields: limit (> 0), period_ms, ban_ms,
--            cost, burst (>= cost): the general form's.
--   'u', 'U': a fixed-window counter without a ban whose window the client
--            knows is on (a Store from Dial remembers when the windows it
--            read end): INCRBY alone. Fields: limit, cost.
--   'v', 'V': the same with a ban: its PTTL, then INCRBY. Fields: limit,
--            ban_ms, cost.
--   The general form, for any op:
--   'g<kind><flags><peek>': kind is 0 (count), 1 (distinct), 2 (sliding
--            window) or 3 (token bucket); flags is 1 (terminal) + 2 (has a
--            ban key) + 4 (spent: a sliding window or token bucket charges
--            the cost even past the limit, a debt); peek is 1 in a peek, 0
--            in a check. Fields: limit,
--            period_ms, ban_ms, cost, member (of a distinct op; the burst of
--            a token bucket; "" otherwise).
--
-- Returns three values per evaluated op, stopping after an exceeded terminal op:
--   count: the counter (an integer, or a string when fractional: Lua numbers
--          would be truncated to integers) or the set size;
--   ttl:   milliseconds left in the window, or in the ban when banned; the
--          period when the key does not exist;
--   bits:  1 banned, 2 exceeded, 4 the count value is what the client
--          computes a passed sliding window's or token bucket's fractional
--          count from: the count times period_ms (a whole number), or the
--          fraction of a ms that the bucket's TTL was rounded up by (count =
--          (ttl - fraction) * limit / period_ms). A script that formats a
--          fraction as a string costs Redis more than a command.
-- A 'u' or 'v' op returns one value instead: its count (whole, at most
-- 2^53), from which the client, knowing the window's TTL, derives the rest;
-- or nil when the op was not charged (banned, or a value INCRBY refuses) and
-- the script stopped there, for the client to evaluate it again in another
-- form. A count no more than the cost says that INCRBY made the key anew,
-- without a TTL: the client then starts its window. When such an op is the
-- only one evaluated, the value is the whole reply.
-- When only one op is evaluated (the usual check) and its count is a whole
-- number and its ttl below 2^32, the three values come packed in one integer
-- instead: count * 2^(5 + w) + ttl * 32 + tier * 8 + bits, where the tier
-- (0 to 3) gives w, the bits left for the ttl: 16, 22, 27 or 32, the fewest
-- that hold it. A count too large for the 53 bits of a double's integers
-- comes as the three values.
--
-- Windows run on Redis's clock: a window is the key's TTL, set on the first
-- write and never extended. The sliding window and token bucket keep their
-- time in their key's TTL too (see algorithm below), never as a timestamp,
-- so that a key means the same whatever the clock of the server reading it.
--
-- Redis spends more on running a script than on the commands it runs: about
-- as much as five plain commands to start it and convert its reply, then per
-- redis.call the command and the conversion of its arguments and reply, and
-- per argument of the script a string and a table slot (docs/design.md has
-- the figures, bench/cmd/scriptcpu measures them). So the short forms cost
-- the fewest commands (a fixed window: INCRBY and PTTL, and PEXPIRE on its
-- first write; a sliding window: PTTL, HINCRBY and HGET; a token bucket:
-- SET NX when full, else PTTL, GET and SET), take the fewest arguments,
-- pass the arguments on to Redis as the strings they came as (a Lua number
-- costs a conversion), convert a string only when they compute with it, and
-- define no function:
-- the general code below is defined only when an op needs it. A short form
-- that meets anything unusual (a value of another type; for a counter, a
-- fraction) hands the op to the general code before it writes anything.

local rcall, rpcall, type = redis.call, redis.pcall, type
local KEYS, ARGV = KEYS, ARGV

-- general(key, bankey, distinct, hasban, peek, limit, period, banfor, cost, member)
-- and algorithm(key, bankey, bucket, hasban, peek, limit, period, banfor, cost, burst):
-- the general code, defined in the loop below when an op first needs it.
local general, algorithm

-- A counter's short form compares its count r with the limit, a string of
-- decimal digits (whole, >= 0, no leading zero), without converting the limit
-- (a strtod, the most costly step of the op after the commands) when r has
-- fewer digits and so is below it:
--   r >= 10 ^ (#limit - 1) and r > tonumber(limit)
--
-- A count or fraction that a reply number would not keep exactly (a reply
-- number is truncated to an integer) is returned or written as a string,
-- inline for the same reason:
--   if n % 1 ~= 0 or n >= 2^53 then n = string.format('%.17g', n) end

local out, nout, k, a = nil, 0, 1, 1
while true do
  local code = ARGV[a]
  -- Counters whose windows the client knows ('u', 'v'; see the header):
  -- INCRBY alone (after the ban's PTTL), one reply value each. Five rules
  -- cost Redis 60k instructions this way against 105k as 't' ops, whose
  -- PTTL, period and three reply values weigh about as much as the INCRBY
  -- (docs/design.md). They are tested for first, so that a check of them
  -- pays no test of the other codes; an op in another form pays four here.
  while true do
    local r, stop
    if code == 'U' or code == 'u' then
      r = rpcall('INCRBY', KEYS[k], ARGV[a + 2])
      if type(r) ~= 'number' then
        r, stop = false, true -- a fractional or foreign value: handed back
      else
        if r >= 9007199254740992 then r = 9007199254740992 end -- as in 'n'
        if code == 'U' then
          local limit = ARGV[a + 1]
          stop = r >= 10 ^ (#limit - 1) and r > limit + 0
        end
      end
      k, a = k + 1, a + 3
    elseif code == 'V' or code == 'v' then
      local bankey = KEYS[k + 1]
      r = false
      if rcall('PTTL', bankey) == -2 then r = rpcall('INCRBY', KEYS[k], ARGV[a + 3]) end
      if type(r) ~= 'number' then
        r, stop = false, true -- banned, or a fractional or foreign value: handed back
      else
        if r >= 9007199254740992 then r = 9007199254740992 end
        local limit = ARGV[a + 1]
        if r >= 10 ^ (#limit - 1) and r > limit + 0 then
          local banfor = ARGV[a + 2]
          if banfor ~= '0' then rcall('SET', bankey, '1', 'PX', banfor) end
          stop = code == 'V'
        end
      end
      k, a = k + 2, a + 4
    else
      break
    end
    code = ARGV[a]
    if nout == 0 then
      if stop or not code then return r end
      out = {r, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
    else
      out[nout + 1] = r
    end
    nout = nout + 1
    if stop then return out end
  end
  if not code then break end
  local key = KEYS[k]
  local count, ttl, bits, terminal
  -- An op for the general code: its kind (0 count, 1 distinct, 2 sliding
  -- window, 3 token bucket) and fields.
  local gkind, gbankey, gban, gpeek, glimit, gperiod, gbanfor, gcost, gmember, gspent
  if code == 'n' or code == 't' then
    terminal = code == 't'
    local period, cost = ARGV[a + 2], ARGV[a + 3]
    local r = rpcall('INCRBY', key, cost)
    if type(r) == 'number' then
      local pttl = rcall('PTTL', key)
      if pttl == -1 then
        rcall('PEXPIRE', key, period) -- first write: the window starts
        pttl = tonumber(period)
      end
      count, ttl, bits = r, pttl, 0
      local limit = ARGV[a + 1]
      if r >= 10 ^ (#limit - 1) and r > limit + 0 then
        bits = 2
        -- Past 2^53 (a limit is at most 2^53 - 1: exceeded) a count goes
        -- as 2^53, as every store reports it (ratelimit.MaxCount): a reply
        -- number is converted to an integer, past 2^63 into the negative.
        if r >= 9007199254740992 then count = 9007199254740992 end
      end
    else -- a fractional or foreign value: INCRBY wrote nothing
      gkind, gbankey, gban, gpeek, glimit, gperiod, gbanfor, gcost, gmember = 0, key, false, false, ARGV[a + 1], period, '0', cost, ''
    end
    k, a = k + 1, a + 4
  elseif code == 'b' or code == 'B' then
    -- The usual banning op (a login counter): the ban, then the counter.
    -- Its counter code repeats 'n''s on purpose: one branch for both, with
    -- a hasban flag as the sliding window's, cost this form about 1k more
    -- instructions per call (callgrind, 40.8k against 39.8k).
    terminal = code == 'B'
    local bankey, period, cost = KEYS[k + 1], ARGV[a + 2], ARGV[a + 4]
    local bttl = rcall('PTTL', bankey)
    if bttl ~= -2 then
      local r = rpcall('GET', key)
      -- A count other than whole digits (a fraction, a foreign value) goes
      -- to the general code, which reads it as a number or as absent.
      if type(r) ~= 'table' and (not r or string.find(r, '^%d+$')) then
        if bttl < 0 then bttl = 0 end
        count, ttl, bits = r or 0, bttl, 3
      end
    else
      local r = rpcall('INCRBY', key, cost)
      if type(r) == 'number' then
        local pttl = rcall('PTTL', key)
        if pttl == -1 then
          rcall('PEXPIRE', key, period) -- first write: the window starts
          pttl = tonumber(period)
        end
        count, ttl, bits = r, pttl, 0
        local limit = ARGV[a + 1]
        if r >= 10 ^ (#limit - 1) and r > limit + 0 then
          bits = 2
          if r >= 9007199254740992 then count = 9007199254740992 end -- as in 'n'
          local banfor = ARGV[a + 3]
          if banfor ~= '0' then -- whole milliseconds: "0" is the only zero
            rcall('SET', bankey, '1', 'PX', banfor)
            ttl, bits = tonumber(banfor), 3
          end
        end
      end
    end
    if not count then -- a fractional or foreign value: nothing written
      gkind, gbankey, gban, gpeek, glimit, gperiod, gbanfor, gcost, gmember = 0, bankey, true, false, ARGV[a + 1], period, ARGV[a + 3], cost, ''
    end
    k, a = k + 2, a + 5
  elseif code == 'w' or code == 'W' or code == 'x' or code == 'X' then
    -- A sliding window (see algorithm below): charged unless exceeded; 'x'
    -- with a ban, whose key follows in KEYS and whose ban_ms precedes the
    -- cost. An active ban goes to the general code, as a foreign value does.
    terminal = code == 'W' or code == 'X'
    local hasban = code == 'x' or code == 'X'
    local period, cost, bankey, banfor = ARGV[a + 2], ARGV[a + 3], key, '0'
    local handover = false
    if hasban then
      bankey, banfor, cost = KEYS[k + 1], ARGV[a + 3], ARGV[a + 4]
      handover = rcall('PTTL', bankey) ~= -2
    end
    local p, costn = period + 0, cost + 0
    local cur, prev, rem, fresh, prevs = 0, 0, p, true, '0'
    local charged = false
    if not handover then
      local pttl = rcall('PTTL', key)
      if pttl > p then -- this window is on
        -- Charged at once and taken back below if the op is exceeded (the
        -- script runs alone: nobody sees the difference): HINCRBY's reply
        -- is the count as a number, and HGET of the previous count, usually
        -- nil, costs Redis about 4.6k instructions less than HMGET of both
        -- and a conversion. A count that holds a fraction (or a foreign
        -- value) fails HINCRBY, which writes nothing: the general code.
        local r = rpcall('HINCRBY', key, 'c', cost)
        if type(r) ~= 'number' then
          handover = true
        elseif r >= 9007199254740992 then
          -- Past 2^53 the reply number is rounded, and r - cost with it
          -- (an exceeded op reported a count it did not hold): taken back,
          -- the general code reads the count the hash holds.
          rcall('HINCRBY', key, 'c', '-' .. cost)
          handover = true
        else
          -- A previous count that is no finite number (n - n is NaN for
          -- NaN and the infinities) makes the hash foreign: it goes, and
          -- the general code starts a fresh window. One that is no number
          -- at all fails the arithmetic of the call's first op, and with it
          -- the script, naming prevcount: telling it apart takes a C call,
          -- tonumber or string.find, about 1k instructions, 3% of this
          -- form's cost, where arithmetic costs none. The client then sends
          -- the call again once in the general form (store.go,
          -- isForeignPrevious), which replaces the hash: nothing was written
          -- before but this op's HINCRBY, which goes with it. A later op,
          -- after which a failed script would leave the earlier ops
          -- charged (Redis undoes nothing), takes tonumber.
          local prevcount = rcall('HGET', key, 'p') or 0
          if a ~= 1 then prevcount = tonumber(prevcount) or 0 / 0 end
          prevcount = prevcount + 0
          if prevcount - prevcount == 0 then
            cur, prev, rem, fresh, charged = r - costn, prevcount, pttl - p, false, true
          else
            rcall('DEL', key)
            handover = true
          end
        end
      elseif pttl > 0 then -- this window ended: its count is the previous one
        -- A foreign value (of another type, or no finite number) goes to
        -- the general code.
        local v = rpcall('HGET', key, 'c')
        local n = tonumber(v or 0)
        if n and n - n == 0 then
          prev, rem = n, pttl
          if prev ~= 0 then prevs = v end
        else
          handover = true
        end
      end
    end
    if handover then
      gkind, gbankey, gban, gpeek, glimit, gperiod, gbanfor, gcost, gmember = 2, bankey, hasban, false, ARGV[a + 1], period, banfor, cost, ''
    else
      local limit = ARGV[a + 1] + 0
      local before = prev * rem / p + cur
      ttl, bits = rem, 0
      if before + costn <= limit + 1e-9
          or before + costn <= limit + math.min(math.max(1e-9, limit * 2^-44), 0.25) then
        count = before + costn
        if fresh then
          rcall('HSET', key, 'c', cost, 'p', prevs)
          rcall('PEXPIRE', key, rem + p)
        end
        if count % 1 ~= 0 then -- the estimate's fraction: send count x period
          local x = prev * rem + (cur + costn) * p
          if x % 1 == 0 and x < 2^53 then count, bits = x, 4 end
        end
      else
        count, bits = before, 2
        if charged then rcall('HINCRBY', key, 'c', '-' .. cost) end
        if prev > 0 and limit - cur - costn >= 0 then
          ttl = rem - (limit - cur - costn) * p / prev
        elseif costn > limit + math.min(math.max(1e-9, limit * 2^-44), 0.25) then
          -- Never, even on an empty window: when it is empty (rem when only
          -- the previous window counts, now when neither does).
          if cur > 0 then ttl = rem + p elseif prev == 0 then ttl = 0 end
        elseif cur > limit - costn then
          ttl = rem + p * (1 - (limit - costn) / cur)
        end
        if banfor ~= '0' then -- whole milliseconds: "0" is the only zero
          rcall('SET', bankey, '1', 'PX', banfor)
          ttl, bits = tonumber(banfor), 3
        end
        if ttl < 0 then ttl = 0 end
        if ttl % 1 ~= 0 then ttl = math.ceil(ttl) end
      end
      if count % 1 ~= 0 or count >= 2^53 then count = string.format('%.17g', count) end
    end
    if hasban then k, a = k + 2, a + 5 else k, a = k + 1, a + 4 end
  elseif code == 'k' or code == 'K' or code == 'y' or code == 'Y' then
    -- A token bucket (see algorithm below): charged unless it lacks tokens;
    -- 'y' with a ban, whose key follows in KEYS, with the general form's
    -- fields. An active ban goes to the general code, as a foreign value
    -- does.
    terminal = code == 'K' or code == 'Y'
    local hasban = code == 'y' or code == 'Y'
    local period, cost, burst, bankey, banfor = ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], key, '0'
    local handover = false
    if hasban then
      bankey, banfor, cost, burst = KEYS[k + 1], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
      handover = rcall('PTTL', bankey) ~= -2
    end
    -- A full bucket (its key is gone once it is full again), which has the
    -- cost (the client sends no more): SET NX makes it what the client sent,
    -- as strings, so that Redis formats no number (7.0 formats a number
    -- argument as a fraction), and only when the key is absent; with GET it
    -- also reads the value that is there otherwise. So a full bucket takes
    -- one call and another one three, as when its TTL was read first. (A
    -- server before Redis 7.0 refuses NX with GET: the error is not false,
    -- so the op takes the long way, reading the TTL and the value.)
    local v = false
    if not hasban then
      v = rpcall('SET', key, ARGV[a + 6], 'PX', ARGV[a + 5], 'NX', 'GET')
    end
    if v == false and not hasban then
      count, ttl, bits = cost + 0, ARGV[a + 5] + 0, 0
    else
      local d = 0
      if not handover then
        local pttl = rcall('PTTL', key)
        if pttl > 0 then
          if hasban then v = rpcall('GET', key) end
          if v and v.err then
            handover = true
          else
            -- A value that is no fraction of a ms (a foreign one: not a
            -- number, NaN, negative, over the TTL) reads as a full bucket.
            d = pttl - (tonumber(v) or pttl)
            if not (d >= 0 and d <= pttl) then d = 0 end
          end
        end
      end
      if handover then
        gkind, gbankey, gban, gpeek, glimit, gperiod, gbanfor, gcost, gmember = 3, bankey, hasban, false, ARGV[a + 1], period, banfor, cost, burst
      else
        local burstn, costn = burst + 0, cost + 0
        local t = period / ARGV[a + 1]
        local before = d / t
        if before + costn <= burstn + 1e-9
            or before + costn <= burstn + math.min(math.max(1e-9, burstn * 2^-44), 0.25) then
          ttl = d + costn * t
          local ms = math.ceil(ttl)
          if ms < 1 then ms = 1 end
          if ms > 9007199254740992 then
            -- Full again past 2^53 ms (285,000 years): kept at that, as in
            -- the memory store (maxBucketNanos), since Redis refuses a PX
            -- that Lua formats with an exponent; the count goes as it is.
            rcall('SET', key, '0', 'PX', '9007199254740992')
            count, ttl, bits = string.format('%.17g', before + costn), 9007199254740992, 0
          else
            local frac = ms - ttl
            if frac == 0 then
              frac = '0'
            else
              frac = string.format('%.17g', frac)
            end
            rcall('SET', key, frac, 'PX', ms)
            -- The count is (ms - frac) / t: the client computes it from what
            -- was written rather than have Redis format a second fraction.
            count, ttl, bits = frac, ms, 4
          end
        else
          -- (burst - cost) * t, not cost * t - burst * t: the products of a
          -- large burst are rounded by far more than the wait they differ by.
          count, ttl, bits = before, d - (burstn - costn) * t, 2
          if banfor ~= '0' then -- whole milliseconds: "0" is the only zero
            rcall('SET', bankey, '1', 'PX', banfor)
            ttl, bits = tonumber(banfor), 3
          end
          if ttl < 0 then ttl = 0 end
          if ttl % 1 ~= 0 then ttl = math.ceil(ttl) end
          if count % 1 ~= 0 or count >= 2^53 then count = string.format('%.17g', count) end
        end
      end
    end
    if hasban then k, a = k + 2, a + 6 else k, a = k + 1, a + 7 end
  else
    local kind, flags, peek = string.byte(code, 2, 4)
    if code:sub(1, 1) ~= 'g' or not peek then
      return redis.error_reply('ERR ratekit: bad op code ' .. code)
    end
    flags = flags - 48
    terminal = flags % 2 == 1
    gban = flags % 4 >= 2
    gspent = flags >= 4
    gbankey = key
    if gban then gbankey = KEYS[k + 1]; k = k + 2 else k = k + 1 end
    gkind, gpeek = kind - 48, peek == 49
    glimit, gperiod, gbanfor, gcost, gmember = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
    a = a + 6
  end
  if gkind then
    if not general then
      -- The general code, defined on the first op that needs it: a function
      -- definition makes a new closure each time it runs, which the usual
      -- check should not pay for.
      -- number returns v, a count read from a key, as a number, or nil when it
      -- is no number that INCRBYFLOAT takes: not one Lua reads, NaN or an
      -- infinity, with a space (Lua allows one around it), 5 KiB or longer, or
      -- one Lua reads as 0 that has other digits (Redis refuses a number
      -- that underflows to 0; this also takes 0e5 for foreign, harmlessly).
      -- ceiling is the largest count within limit l (a token bucket's
      -- burst): l plus an allowance for floating-point error, 1e-9 or 2^-44
      -- of l, whichever is larger, and at most 0.25, computed as the memory
      -- store computes it (core/memory_algo.go). The short forms test 1e-9
      -- first, which passes wherever this does for a limit up to 17,592.
      local function ceiling(l)
        return l + math.min(math.max(1e-9, l * 2^-44), 0.25)
      end

      local function number(v)
        local n = tonumber(v)
        if n and n - n == 0 and #v < 5120 and not string.find(v, '%s')
            and (n ~= 0 or not string.find(v, '[1-9]')) then
          return n
        end
        return nil
      end

      -- Keys encode the counting kind, so a value of another type is foreign (an
      -- older version's key, a hand-written one), and so is a string that is no
      -- number where a counter belongs: it is replaced with a fresh counter
      -- rather than failing every check with WRONGTYPE or "not a valid float";
      -- a peek, which writes nothing, treats it as absent. foreign is called
      -- after a command on key failed (which wrote nothing) and reports whether
      -- that was the reason (not, say, an out-of-memory error).
      local function foreign(key, want, peek)
        if redis.call('TYPE', key)['ok'] == want and (want ~= 'string' or number(redis.call('GET', key))) then
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

      -- counter returns the count at key as a reply value (a string when
      -- fractional or too large for a reply number), or nil when key is
      -- absent or holds a foreign value (deleted in a check).
      local function counter(key, peek)
        local v = read('GET', key, 'string', peek)
        if not v then return nil end
        local n = number(v)
        if not n then
          if not peek then redis.call('DEL', key) end
          return nil
        end
        if n % 1 ~= 0 or n >= 2^53 or n <= -2^53 then n = string.format('%.17g', n) end
        return n
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
            count = counter(key, peek) or 0
          end
          if bttl < 0 then bttl = 0 end
          return count, bttl, 3
        end
        limit = tonumber(limit)
        local costn = tonumber(cost)
        local charge = not peek and costn > 0
        local would, known -- known: the counter's PTTL, when read already
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
            -- INCRBY is exact, and cheaper than a sum here, but it takes
            -- whole costs and whole counters only: anything else (a
            -- fractional cost now or before, a foreign value) is summed here.
            local r
            if string.find(cost, '^[1-9]%d*$') then
              r = redis.pcall('INCRBY', key, cost)
            end
            if type(r) == 'number' then
              count, would = r, r
              if r >= 2^53 then count = 2^53 end -- as in the short form
            else
              -- In a double, as the memory store sums its float64, written
              -- as the 17 digits that read back as that double. INCRBYFLOAT
              -- sums in a long double, which keeps what a float64 rounds
              -- away (past 2^52, every half): the stores' counts parted, and
              -- then their verdicts (at a limit of 2^53 - 1, two more costs
              -- of 0.25 blocked on Redis alone).
              local v = read('GET', key, 'string', false)
              local n = v and number(v)
              if v and not n then redis.call('DEL', key) end -- no number: foreign
              known = redis.call('PTTL', key)
              -- A window in its last ms (PTTL 0) ends now, as in the memory
              -- store: a new one starts (SET PX takes no 0, and SET alone
              -- would carry its count into a whole new window).
              if known == 0 then n = nil end
              n = (n or 0) + costn
              r = string.format('%.17g', n)
              if known > 0 then
                redis.call('SET', key, r, 'PX', known)
              else
                redis.call('SET', key, r)
                known = -1 -- no window yet: it starts below
              end
              count, would = r, n
              if n >= 2^53 then count = 2^53 end -- as in the short form
            end
          end
          local pttl = known or redis.call('PTTL', key)
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
              n = counter(key, peek)
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
        if would > ceiling(limit) then -- beyond floating-point error, as the memory store
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

      -- algorithm: a sliding window or token bucket op,
      -- with the formulas of the memory store (core/memory_algo.go), in
      -- milliseconds. Neither charges an exceeded op; an exceeded op's ttl is the
      -- time until the same op would pass, or for a cost that never does (over
      -- the limit or the burst), until the window is empty or the bucket full.
      --
      -- A sliding window is a hash {c: this window's count, p: the previous
      -- window's} whose TTL runs to one period after this window's end: a TTL
      -- over the period means this window is on, one within it that this window
      -- ended (its count is now the previous one), none that both are gone.
      -- A token bucket (GCRA) is a string whose TTL runs to when the bucket is full
      -- again, rounded up to a millisecond; its value is what the rounding added.
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

      algorithm = function(key, bankey, bucket, hasban, peek, limit, period, banfor, cost, burst, spent)
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
            if not (d >= 0 and d <= pttl) then d = 0 end -- as in the short form
          end
          if limit <= 0 or burst <= 0 then -- a limit of 0 denies all
            before, count, ttl, exceeded = 0, 0, period, costn > 0
          else
            local t = period / limit
            before = d / t
            if before + costn <= ceiling(burst) then
              -- At most 2^53 ms, as in the short form.
              count, ttl, exceeded = before + costn, math.min(d + costn * t, 9007199254740992), false
              if charge then
                local ms = math.max(math.ceil(ttl), 1)
                redis.call('SET', key, fmt(ms - ttl), 'PX', ms)
              elseif bttl == -2 then
                ttl = d -- not charged: full again when it was going to be
              end
            elseif costn > ceiling(burst) then
              -- Never, even on a full bucket: when it is full.
              count, ttl, exceeded = before, d, true
            else
              count, ttl, exceeded = before, d - (burst - costn) * t, true -- as in the short form
            end
            if exceeded and spent and charge then
              -- A spent cost is taken all the same: a debt, full again once
              -- it has refilled too (see the memory store).
              local tat = math.min(d + costn * t, 9007199254740992)
              local ms = math.max(math.ceil(tat), 1)
              redis.call('SET', key, fmt(ms - tat), 'PX', ms)
              count = before + costn
            end
          end
        else
          local cur, prev, rem, fresh = 0, 0, period, true
          -- A hash whose counts are no numbers is foreign too: absent, and
          -- deleted in a check.
          local c, p
          if pttl > period then
            local v = value(peek, 'HMGET', key, 'c', 'p')
            if v then c, p = v[1] or '0', v[2] or '0' end
          elseif pttl > 0 then
            local v = value(peek, 'HGET', key, 'c')
            if v ~= nil then c, p = '0', v or '0' end -- nil: foreign, so absent
          end
          if c then
            local cn, pn = number(c), tonumber(p)
            if cn and pn and pn - pn == 0 then
              if pttl > period then
                cur, prev, rem, fresh = cn, pn, pttl - period, false
              else
                prev, rem = pn, pttl
              end
            elseif not peek then
              redis.call('DEL', key)
            end
          end
          before = prev * rem / period + cur
          count, ttl, exceeded = before, rem, before + costn > ceiling(limit)
          -- A spent cost is charged past the limit too: a debt.
          if charge and (not exceeded or spent) then
            count = before + costn
            if fresh then
              redis.call('HSET', key, 'c', cur + costn, 'p', prev)
              redis.call('PEXPIRE', key, rem + period)
            else
              -- Summed in a double, as a counter's (see general): not
              -- HINCRBYFLOAT, whose long double parts from a float64.
              redis.call('HSET', key, 'c', string.format('%.17g', cur + costn))
            end
          end
          if exceeded then
            if prev > 0 and limit - cur - costn >= 0 then
              ttl = rem - (limit - cur - costn) * period / prev
            elseif costn > ceiling(limit) then -- never: when the window is empty
              if cur > 0 then ttl = rem + period elseif prev == 0 then ttl = 0 end
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
    if gkind >= 2 then
      count, ttl, bits = algorithm(key, gbankey, gkind == 3, gban, gpeek, glimit, gperiod, gbanfor, gcost, gmember, gspent)
    else
      count, ttl, bits = general(key, gbankey, gkind == 1, gban, gpeek, glimit, gperiod, gbanfor, gcost, gmember)
    end
  end
  -- A wait past 2^53 ms (285,000 years; a bucket's TTL written by hand: a
  -- cost no bucket holds waits until it is full) goes as 2^53: Redis converts a reply
  -- number past 2^63 to garbage. The client takes any wait past the longest
  -- Duration for the longest Duration (outcome in store.go).
  if ttl > 9007199254740992 then ttl = 9007199254740992 end
  if nout == 0 then
    if not ARGV[a] or terminal and bits >= 2 and bits < 4 then
      -- The only op's values packed in one integer (see Returns above) when
      -- they fit: Redis converts a table reply at about 5k instructions, as
      -- much as two commands, and a number at a few hundred.
      if type(count) == 'number' and count >= 0 and count % 1 == 0
          and ttl >= 0 and ttl < 4294967296 and ttl % 1 == 0 then
        local m, low = 137438953472, 24 + bits -- 2^37: a TTL below 2^32
        if ttl < 65536 then m, low = 2097152, bits -- 2^21: below 2^16
        elseif ttl < 4194304 then m, low = 134217728, 8 + bits -- 2^27: 2^22
        elseif ttl < 134217728 then m, low = 4294967296, 16 + bits end -- 2^32: 2^27
        if count < 9007199254740992 / m then -- 2^53: a double's integers
          return count * m + ttl * 32 + low
        end
      end
    end
    -- Sized at once: most checks are one op, and a table that grows is
    -- copied at each power of two (the nils only reserve room for 5 ops).
    if ARGV[a] then
      out = {count, ttl, bits, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
    else
      out = {count, ttl, bits}
    end
  else
    out[nout + 1], out[nout + 2], out[nout + 3] = count, ttl, bits
  end
  nout = nout + 3
  if terminal and bits >= 2 and bits < 4 then
    break
  end
end
return out or {}
