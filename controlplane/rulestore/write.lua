-- Applies a batch of tier edits to the per-limiter documents atomically: the
-- read-modify-write happens here, on the server, so concurrent writers never
-- conflict and never lose each other's rules.
--
-- Rules travel as the exact bytes the client's encoder made
-- (config.MarshalLimiterRules); this script never re-encodes a rule. It only
-- finds the rules of a stored document (a structural scan, strings and
-- nesting aware), replaces, appends or drops whole rule byte strings, and
-- reassembles the envelope in the one canonical form:
--   {"default_rules":{"rules":[...]},"file_rules":{...},"published_rules":{...}}
-- (tiers in this order, each only when present; a tier that sets the
-- limiter's mode writes it first: {"mode":"shadow","rules":[...]}). Rules it does not touch keep
-- their bytes, so a document written by another SDK in the same shape is
-- left byte for byte as it was.
--
-- KEYS[1]   index: set of limiters with a document
-- KEYS[2]   revision counter
-- KEYS[3..] documents, one per edit of the plan, in order
-- ARGV[1]   the plan, JSON: one edit per document
-- ARGV[2]   the most rules a tier may hold (ratelimit.MaxRulesPerTier)
-- ARGV[3]   the most bytes a document may hold (ratelimit.MaxDocumentBytes)
-- ARGV[4]   the most limiters the index may hold (rulestore.MaxLimiters)
-- ARGV[5]   "1" for a dry run (CheckPublish): every check, no write
--   {"limiter":"x","op":"publish","rules":[["name","{rule json}"],...],"mode":"\"shadow\""}
--   {"limiter":"x","op":"seed","file":["{rule}",...],"defaults":[...],"file_mode":"\"shadow\""}
-- (mode and file_mode are optional JSON strings, already encoded)
--   {"limiter":"x","op":"delete","names":["name",...],"clear_mode":true}
--   (clear_mode, optional, also removes the published tier's mode)
--   {"limiter":"x","op":"remove"}: the whole key, whatever it holds
--   any edit may carry "expect":"<sha1 hex of the document, '' for none>":
--   the compare-and-set of PublishIf, DeleteIf and RemoveIf (a remove's ''
--   also stands for a key of another type or a string over ARGV[3])
--
-- Returns {1, revision, replaced, limiter...} with the limiters whose
-- document changed (an edit that changes nothing writes nothing, and the
-- revision only moves when something was written), replaced being the Redis
-- type of an index of another type that the write replaced ('' when none);
-- {-1, limiter, reason} when a stored document cannot be read (one over
-- ARGV[3] bytes is not read: only a remove takes it); {-2,
-- limiter, name...} when delete names rules that are not published; {-5,
-- limiter} when a delete's clear_mode finds no published mode; {-3,
-- limiter, version} when a document is not at its expected
-- version; {-4, limiter, reason} when a publish or seed would leave a
-- document over a bound that every reader enforces (a delete only shrinks
-- one, so it may proceed on a document over the rules bound), or would add
-- a limiter to an index that holds ARGV[4] already (writes to indexed
-- limiters, deletes and removes proceed on an index over it). On an error
-- nothing is written.

local function skip_ws(s, i)
  return s:find('[^ \t\r\n]', i) or #s + 1
end

local function skip_string(s, i) -- s:sub(i, i) == '"'
  local j = i + 1
  while true do
    local k = s:find('["\\]', j)
    if not k then error('unterminated string') end
    if s:sub(k, k) == '"' then return k + 1 end
    j = k + 2
  end
end

local function skip_value(s, i)
  local c = s:sub(i, i)
  if c == '"' then return skip_string(s, i) end
  if c == '{' or c == '[' then
    local depth, j = 0, i
    while true do
      local k = s:find('[%[%]{}"]', j)
      if not k then error('unterminated ' .. c) end
      local ch = s:sub(k, k)
      if ch == '"' then
        j = skip_string(s, k)
      else
        if ch == '{' or ch == '[' then depth = depth + 1 else depth = depth - 1 end
        j = k + 1
        if depth == 0 then return j end
      end
    end
  end
  local k = s:find('[,}%] \t\r\n]', i)
  if k == i then error('value expected at ' .. i) end
  return k or #s + 1
end

-- items returns the {start, stop} ranges of the members (object: key, value
-- start, value stop) or elements (array) of the container at s[i].
local function items(s, i, object)
  local out, close = {}, object and '}' or ']'
  i = skip_ws(s, i + 1)
  if s:sub(i, i) == close then return out, i + 1 end
  while true do
    local key
    if object then
      if s:sub(i, i) ~= '"' then error('member name expected at ' .. i) end
      local e = skip_string(s, i)
      key = cjson.decode(s:sub(i, e - 1))
      i = skip_ws(s, e)
      if s:sub(i, i) ~= ':' then error('":" expected at ' .. i) end
      i = skip_ws(s, i + 1)
    end
    local e = skip_value(s, i)
    out[#out + 1] = {key, i, e}
    i = skip_ws(s, e)
    local c = s:sub(i, i)
    if c == close then return out, i + 1 end
    if c ~= ',' then error('"," or "' .. close .. '" expected at ' .. i) end
    i = skip_ws(s, i + 1)
  end
end

local tier_names = {'default_rules', 'file_rules', 'published_rules'}
local known = {default_rules = true, file_rules = true, published_rules = true}

-- parse returns the tiers of a document: name -> {rules = {bytes...},
-- names = {rule name...}, mode = bytes or nil}; an absent tier is nil.
local function parse(doc)
  local i = skip_ws(doc, 1)
  if doc:sub(i, i) ~= '{' then error('not a JSON object') end
  local members, e = items(doc, i, true)
  if skip_ws(doc, e) <= #doc then error('data after the document') end
  local tiers = {}
  for _, m in ipairs(members) do
    local name, v = m[1], doc:sub(m[2], m[3] - 1)
    if not known[name] then error('unknown field ' .. name) end
    if tiers[name] then error('duplicate field ' .. name) end
    if v ~= 'null' then
      if v:sub(1, 1) ~= '{' then error(name .. ' is not an object') end
      local tier = {rules = {}, names = {}}
      for _, tm in ipairs((items(v, 1, true))) do
        local arr = v:sub(tm[2], tm[3] - 1)
        if tm[1] == 'mode' then
          if arr ~= 'null' then tier.mode = arr end
        elseif tm[1] ~= 'rules' then
          error('unknown field ' .. name .. '.' .. tm[1])
        elseif arr ~= 'null' then
          if arr:sub(1, 1) ~= '[' then error(name .. '.rules is not an array') end
          for _, el in ipairs((items(arr, 1, false))) do
            local raw = arr:sub(el[2], el[3] - 1)
            local r = cjson.decode(raw)
            if type(r) ~= 'table' or type(r.name) ~= 'string' then error('a rule of ' .. name .. ' has no name') end
            tier.rules[#tier.rules + 1] = raw
            tier.names[#tier.names + 1] = r.name
          end
        end
      end
      tiers[name] = tier
    end
  end
  return tiers
end

local function encode(tiers)
  local parts = {}
  for _, name in ipairs(tier_names) do
    local t = tiers[name]
    if t then
      local mode = ''
      if t.mode then mode = '"mode":' .. t.mode .. ',' end
      parts[#parts + 1] = '"' .. name .. '":{' .. mode .. '"rules":[' .. table.concat(t.rules, ',') .. ']}'
    end
  end
  if #parts == 0 then return nil end
  return '{' .. table.concat(parts, ',') .. '}'
end

local function index_of(list, v)
  for i, x in ipairs(list) do
    if x == v then return i end
  end
  return nil
end

local function tier_of(rules) -- a seeded tier: only publish needs names
  local t = {rules = {}, names = {}}
  for i, raw in ipairs(rules) do
    t.rules[i] = raw
  end
  return t
end

-- list reads an optional array of the plan (null or missing: empty).
local function list(v)
  if type(v) ~= 'table' then return {} end
  return v
end

local plan = cjson.decode(ARGV[1])
local max_rules, max_bytes, max_limiters = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

-- over returns why tiers, encoded as doc, break a bound (nil when none).
local function over(tiers, doc)
  for _, name in ipairs(tier_names) do
    local t = tiers[name]
    if t and #t.rules > max_rules then
      return name .. ' would hold ' .. #t.rules .. ' rules, at most ' .. max_rules
    end
  end
  if doc and #doc > max_bytes then
    return 'the document would be ' .. #doc .. ' bytes, at most ' .. max_bytes
  end
  return nil
end

local writes = {}
for i, edit in ipairs(plan) do
  local kind = redis.call('TYPE', KEYS[i + 2])
  if type(kind) == 'table' then kind = kind.ok end
  local cur = nil
  if edit.op == 'remove' then
    if edit.expect ~= nil then
      -- the version a reader gives: of a string within the size bound; ''
      -- for none, another type or a longer string (never read here either)
      local v = ''
      if kind == 'string' and redis.call('STRLEN', KEYS[i + 2]) <= max_bytes then
        v = redis.sha1hex(redis.call('GET', KEYS[i + 2]))
      end
      if v ~= edit.expect then return {-3, edit.limiter, v} end
    end
    kind = 'none' -- whatever the key holds goes
  elseif kind ~= 'none' and kind ~= 'string' then
    return {-1, edit.limiter, 'the key is a Redis ' .. kind .. ', not a string'}
  elseif kind == 'string' then
    -- Read only within the bound every reader enforces: parsing a value of
    -- any size here would hold Redis (and every check on it) for as long as
    -- the parse takes, about a second per MB. A longer one goes by Remove,
    -- as readers say; none of it was in force.
    local n = redis.call('STRLEN', KEYS[i + 2])
    if n > max_bytes then
      return {-1, edit.limiter, 'the document is ' .. n .. ' bytes, at most ' .. max_bytes .. ' (docs/limits.md)'}
    end
    cur = redis.call('GET', KEYS[i + 2])
  end
  local tiers = {}
  if cur then
    local ok, res = pcall(parse, cur)
    if not ok then return {-1, edit.limiter, tostring(res)} end
    tiers = res
  end
  if edit.expect ~= nil and edit.op ~= 'remove' then
    local v = cur and redis.sha1hex(cur) or ''
    if v ~= edit.expect then return {-3, edit.limiter, v} end
  end
  if edit.op == 'publish' then
    local rules = list(edit.rules)
    local mode = edit.mode
    if type(mode) ~= 'string' then mode = nil end
    if #rules > 0 or mode then
      local t = tiers.published_rules or {rules = {}, names = {}}
      if mode then t.mode = mode end
      for _, r in ipairs(rules) do
        local at = index_of(t.names, r[1])
        if at then
          t.rules[at] = r[2]
        else
          t.rules[#t.rules + 1] = r[2]
          t.names[#t.names + 1] = r[1]
        end
      end
      tiers.published_rules = t
    end
  elseif edit.op == 'seed' then
    local file, defaults = list(edit.file), list(edit.defaults)
    local file_mode = edit.file_mode
    if type(file_mode) ~= 'string' then file_mode = nil end
    if cur or #file > 0 or #defaults > 0 or file_mode then
      tiers.file_rules = tier_of(file)
      tiers.file_rules.mode = file_mode
      tiers.default_rules = tier_of(defaults)
    end
  elseif edit.op == 'delete' then
    -- by sets, in one pass: a delete may shrink a tier of any size
    local t = tiers.published_rules or {rules = {}, names = {}}
    local missing = {-2, edit.limiter}
    local names, held, drop = list(edit.names), {}, {}
    for _, n in ipairs(t.names) do held[n] = true end
    for _, n in ipairs(names) do
      if not held[n] then missing[#missing + 1] = n end
      drop[n] = true
    end
    if #missing > 2 then return missing end
    local kept = {rules = {}, names = {}, mode = t.mode}
    if edit.clear_mode == true then
      if not t.mode then return {-5, edit.limiter} end
      kept.mode = nil
    end
    for j, n in ipairs(t.names) do
      if not drop[n] then
        kept.rules[#kept.rules + 1] = t.rules[j]
        kept.names[#kept.names + 1] = n
      end
    end
    t = kept
    if #t.rules == 0 and not t.mode then t = nil end -- a published mode outlives its rules (clear_mode removes it)
    tiers.published_rules = t
  elseif edit.op == 'remove' then
    cur = redis.call('EXISTS', KEYS[i + 2]) == 1 and '' or nil
    tiers = {}
  else
    return redis.error_reply('unknown op ' .. tostring(edit.op))
  end
  local new = encode(tiers)
  if edit.op == 'publish' or edit.op == 'seed' then
    local why = over(tiers, new)
    if why then return {-4, edit.limiter, why} end
  end
  writes[i] = {edit.limiter, cur, new}
end

-- The index is checked before anything is written, as Redis keeps what a
-- script wrote before it fails: one of another Redis type (written by hand
-- or by a foreign tool) is no index, and is replaced by a set of the
-- limiters written from now on, rather than failing every write (a delete
-- or a remove half done, its document gone and its SREM failed).
local index_type = redis.call('TYPE', KEYS[1])
if type(index_type) == 'table' then index_type = index_type.ok end
local index_foreign = index_type ~= 'set' and index_type ~= 'none'

-- the index bound: only a publish or seed adds a limiter to the index (a
-- delete that keeps a document only repairs an index that misses it)
local added, first = 0, nil
for i, w in ipairs(writes) do
  local op = plan[i].op
  if w[3] ~= nil and (op == 'publish' or op == 'seed') and (index_foreign or redis.call('SISMEMBER', KEYS[1], w[1]) == 0) then
    added = added + 1
    first = first or w[1]
  end
end
if added > 0 then
  local n = index_foreign and 0 or redis.call('SCARD', KEYS[1])
  if n + added > max_limiters then
    return {-4, first, 'the index of limiters would hold ' .. (n + added) .. ' limiters, at most ' .. max_limiters .. '; Remove the documents of limiters no service declares'}
  end
end

local rev_ok = rev_usable(KEYS[2]) -- before anything is written (revcheck.lua)

-- A dry run stops here, every check passed: it names the documents the
-- write would change and the current revision, and writes nothing.
if ARGV[5] == '1' then
  local out = {1, rev_ok and tonumber(redis.call('GET', KEYS[2]) or '0') or 0, ''}
  for _, w in ipairs(writes) do
    if (w[3] == nil and w[2]) or (w[3] ~= nil and w[3] ~= w[2]) then out[#out + 1] = w[1] end
  end
  return out
end

local out = {1, 0, ''}
if index_foreign then
  redis.call('UNLINK', KEYS[1])
  out[3] = index_type
end
for i, w in ipairs(writes) do
  local name, cur, new = w[1], w[2], w[3]
  if new == nil then
    if cur then
      redis.call('UNLINK', KEYS[i + 2])
      out[#out + 1] = name
    end
    redis.call('SREM', KEYS[1], name)
  else
    if new ~= cur then
      redis.call('SET', KEYS[i + 2], new)
      out[#out + 1] = name
    end
    -- also for an unchanged document: repairs an index that misses it
    redis.call('SADD', KEYS[1], name)
  end
end
if #out > 3 then
  if not rev_ok then
    redis.call('UNLINK', KEYS[2])
  end
  out[2] = redis.call('INCR', KEYS[2])
elseif rev_ok then
  out[2] = tonumber(redis.call('GET', KEYS[2]) or '0')
end
return out
