-- Garbage-collects the documents of limiters that available_limiters.yaml no
-- longer declares, after a grace period, atomically.
--
-- KEYS[1]   index: set of limiters with a document
-- KEYS[2]   orphan marks: hash limiter -> first seen orphaned (Unix ms)
-- KEYS[3]   revision counter
-- KEYS[4]   the cursor of the scan for unindexed documents (scan.lua)
-- KEYS[5..] documents of the index members the client read, then those of
--           the unindexed limiters its scan found
-- ARGV[1]   grace period in ms
-- ARGV[2]   now in Unix ms, "" for the Redis server's clock (TIME), so that
--           every process of the fleet measures the grace on one clock
-- ARGV[3]   n, the number of available limiters, then ARGV[4..3+n] their
--           names, then one limiter name per KEYS[5..] document, then the
--           longest limiter name in bytes (rulecheck.MaxNameLen), then "1"
--           for a dry run (CheckGC): the same run, writing nothing, then the
--           most limiters the index may hold (rulestore.MaxLimiters), then
--           the most orphan marks GC walks (maxMarks), then the number of
--           index members read, then the cursor the scan stopped at ("0":
--           its pass is over)
--
-- An index member longer than a limiter name (written by hand; readers never
-- receive it) is removed, with the document key it would name.
--
-- An index or orphan marks of another Redis type (written by hand or by a
-- foreign tool) are replaced, before anything else is written: the index by
-- the limiters written from now on, the marks by those of this run (each
-- orphan's grace starts over). So are orphan marks of more fields than GC
-- walks (written by hand: GC keeps one per indexed limiter, and those of
-- limiters that left the index until its next run), never walked.
--
-- A limiter with an orphan mark and a document that the index does not name
-- (the index was replaced, or its member removed by hand) is indexed again,
-- in name order while the index holds fewer than ARGV's most limiters, so
-- that a later run collects it after its grace: the marks are what the store
-- knows of the limiters no service declares.
--
-- Then a document the scan found that the index does not name, without a
-- mark (written by another SDK or by hand, or left by a replaced index), is
-- indexed, in name order while the index holds fewer than ARGV's most
-- limiters, and marked as an orphan when no longer declared: a later run
-- collects it after its grace, never this one. One that may be another rule
-- store's is left unindexed: when a store's @index or @rev exists at this
-- prefix followed by the start of its name (a store whose prefix is longer
-- by limiter-name characters), and every one when it exists at this prefix
-- shortened by limiter-name characters (a store whose documents' names
-- start with what this prefix adds to its own).
--
-- Returns {now, marked, pending (name, mark pairs), deleted, cleared,
-- the number of members removed for their length, {the Redis type of the
-- index replaced or '', that of the marks replaced or ''}, the number of
-- marks removed for limiters no longer indexed, the limiters indexed
-- again, the number of fields of marks replaced for their number or 0,
-- the limiters the scan found and indexed, those it found and left (another
-- store's, or past the index's room)}: what the run did, or for a dry run
-- what it would do.
local now
if ARGV[2] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[2])
end
local grace = tonumber(ARGV[1])
local n = tonumber(ARGV[3])
local available = {}
for i = 4, 3 + n do
  available[ARGV[i]] = true
end
-- ARGV after the names of the documents
local base = n + #KEYS - 1
local maxlen = tonumber(ARGV[base + 1])
local dry = ARGV[base + 2] == '1'
local max_limiters = tonumber(ARGV[base + 3])
local members = tonumber(ARGV[base + 5])
-- write runs a command that changes the store, which a dry run skips: every
-- read below reads the store as the real run finds it, whether or not the
-- writes before it were made
local function write(...)
  if not dry then
    return redis.call(...)
  end
end
local rev_ok = rev_usable(KEYS[3]) -- before anything is written (revcheck.lua)
local replaced, marks_over = {'', ''}, 0
for k = 1, 2 do
  local t = redis.call('TYPE', KEYS[k])
  if type(t) == 'table' then t = t.ok end
  if t ~= 'none' and t ~= (k == 1 and 'set' or 'hash') then
    write('UNLINK', KEYS[k])
    replaced[k] = t
  elseif k == 2 and t == 'hash' then
    local fields = redis.call('HLEN', KEYS[2])
    if fields > tonumber(ARGV[base + 4]) then
      write('UNLINK', KEYS[2])
      replaced[2], marks_over = t, fields
    end
  end
end
-- a replaced index or marks read as empty, as they are once deleted; a
-- limiter this run indexes is a member, also in a dry run
local added = {}
local function is_member(name)
  if added[name] then return 1 end
  if replaced[1] ~= '' then return 0 end
  return redis.call('SISMEMBER', KEYS[1], name)
end
local function mark_of(name)
  if replaced[2] ~= '' then return false end
  return redis.call('HGET', KEYS[2], name)
end
-- the index's size before this run removes anything: it holds members the
-- client did not read (longer than a name, or added since) when it holds
-- more than the read members still in it
local card = replaced[1] == '' and redis.call('SCARD', KEYS[1]) or 0
local present = 0
local marked, pending, deleted, cleared = {}, {}, {}, {}
for i = 5, 4 + members do
  local name = ARGV[n + i - 1]
  -- a member the client read may have gone since; one added since waits for
  -- the next run
  if is_member(name) == 1 then
    present = present + 1
    local mark = mark_of(name)
    -- a mark that is no time in ms (written by hand) is made again
    local since = mark and #mark <= 15 and string.match(mark, '^%d+$') and tonumber(mark)
    if available[name] then
      if mark then
        write('HDEL', KEYS[2], name)
        cleared[#cleared + 1] = name
      end
    elseif not since then
      write('HSET', KEYS[2], name, string.format('%d', now))
      marked[#marked + 1] = name
    elseif now - since >= grace then
      write('UNLINK', KEYS[i])
      write('SREM', KEYS[1], name)
      write('HDEL', KEYS[2], name)
      deleted[#deleted + 1] = name
    else
      pending[#pending + 1] = name
      pending[#pending + 1] = mark
    end
  end
end
-- size is the index's as this run leaves it
local size = card - #deleted
local prefix = string.sub(KEYS[1], 1, -7) -- the index is prefix .. '@index'
-- marks of limiters that left the index some other way (replaced marks
-- hold only this run's, all of members; a dry run finds the marks of the
-- members it would delete or clear still there, of members still indexed,
-- so it counts what the real run does here): a limiter whose document is
-- gone loses its mark, one whose document is there is indexed again
local stale, unindexed, reindexed = 0, {}, {}
if replaced[2] == '' then
  for _, name in ipairs(redis.call('HKEYS', KEYS[2])) do
    if is_member(name) == 0 then
      if #name <= maxlen and string.match(name, '^[a-z0-9_]+$') and redis.call('EXISTS', prefix .. name) == 1 then
        unindexed[#unindexed + 1] = name
      else
        write('HDEL', KEYS[2], name)
        stale = stale + 1
      end
    end
  end
end
-- in name order, as HKEYS's order differs between a run and its dry run
table.sort(unindexed)
for _, name in ipairs(unindexed) do
  if size >= max_limiters then break end
  write('SADD', KEYS[1], name)
  added[name] = true
  size = size + 1
  reindexed[#reindexed + 1] = name
end
-- then the documents the scan found unindexed, none of which has a mark
-- (those with one were indexed just above, room allowing)
local function store_at(p)
  return redis.call('EXISTS', p .. '@index', p .. '@rev') > 0
end
-- a rule store whose prefix is this one's shortened by limiter-name
-- characters: its documents whose names start with them are this store's
local outer = false
for i = #prefix - 1, 1, -1 do
  if not string.match(string.sub(prefix, i + 1, i + 1), '^[a-z0-9_]$') then break end
  if store_at(string.sub(prefix, 1, i)) then
    outer = true
    break
  end
end
local found, left = {}, {}
for i = 5 + members, #KEYS do
  local name = ARGV[n + i - 1]
  if is_member(name) == 0 and redis.call('EXISTS', KEYS[i]) == 1 then
    -- a rule store whose prefix is this one's followed by the start of name
    local nested = false
    for j = 1, #name - 1 do
      if store_at(prefix .. string.sub(name, 1, j)) then
        nested = true
        break
      end
    end
    if outer or nested or size >= max_limiters then
      left[#left + 1] = name
    else
      write('SADD', KEYS[1], name)
      added[name] = true
      size = size + 1
      found[#found + 1] = name
      -- it has no mark: the marks' limiters with a document were indexed
      -- above, or there was no room for it either
      if not available[name] then
        write('HSET', KEYS[2], name, string.format('%d', now))
        marked[#marked + 1] = name
      end
    end
  end
end
-- where the next run's scan goes on
local cursor = ARGV[base + 6]
if cursor == '0' then
  write('UNLINK', KEYS[4])
else
  write('SET', KEYS[4], cursor)
end
local longer = 0
if card > present then
  for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
    if #name > maxlen then
      write('SREM', KEYS[1], name)
      write('HDEL', KEYS[2], name)
      write('UNLINK', prefix .. name)
      longer = longer + 1
    end
  end
end
if #deleted > 0 or longer > 0 then
  if not rev_ok then
    write('UNLINK', KEYS[3])
  end
  write('INCR', KEYS[3])
end
return {string.format('%d', now), marked, pending, deleted, cleared, longer, replaced, stale, reindexed, marks_over, found, left}
