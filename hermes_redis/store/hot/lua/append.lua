-- Append a batch of messages (one, or a whole turn): consecutive seqs stamped into the
-- payloads, counters, index, backlog, id map and TTL updated, all in one atomic step
-- (invariants 1, 2, 5).
-- KEYS: meta, list, index, backlog, full, ids
-- ARGV: now, session_id, title, dedupe, n, then n groups of (payload, tokens, message_id,
--       full_text)
-- dedupe: '0' store; '1' first look for these message_ids (an earlier attempt landed);
--         '2' as '1', the archive already looked (issue 35).
-- ids: message_id -> seq of every message appended since the keys were made, less those
-- trimmed (archived) or forgotten; meta 'ids_from' is the highest seq it may lack (those
-- are archived). Idempotency needs no window: the map, then the archive, answer a retry.
-- Returns {flags, seq_1, ..., seq_n}: flags bit 1, enqueue a flush; bit 2, an earlier
-- attempt holds these ids (their seqs, 0 for an id it lacks) and nothing was stored.
-- Errors: NOSESSION, STATUS <status>, FORGOTTEN <message_id>, CHECKARCHIVE (dedupe '1' on a
-- session whose archived messages the map lacks: look there, then send it with '2').
local meta, list, index, backlog, full, ids = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local now, sid, title, dedupe, n = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
-- one read and one write of the meta hash: each redis.call costs about a microsecond
local m = redis.call('HMGET', meta, 'status', 'last_seq', 'message_count', 'total_tokens',
                     'title', 'pending', 'ids_from')
local status = m[1]
if not status then return redis.error_reply('NOSESSION') end
if status ~= 'active' then return redis.error_reply('STATUS ' .. status) end
if dedupe ~= '0' then
  local wanted = {}
  for i = 0, n - 1 do wanted[i + 1] = ARGV[8 + 4 * i] end
  -- a lost reply's flush job may never have been enqueued: report it again while pending
  local out, found = {m[6] and 3 or 2}, false
  for i, seq in ipairs(redis.call('HMGET', ids, unpack(wanted))) do
    if seq then
      out[i + 1] = tonumber(seq)
      found = true
    end
  end
  if not found then
    -- the newest entries: sessions appended to before the id map existed
    local at = {}
    for i, id in ipairs(wanted) do at[id] = i + 1 end
    for _, item in ipairs(redis.call('LRANGE', list, -(64 + n), -1)) do
      local i = at[string.sub(item, 14, 45)]
      if i then
        local hi, lo = struct.unpack('>I4I4', item, 4)
        out[i] = hi * 4294967296 + lo
        found = true
      end
    end
  end
  if found then
    for i = 2, n + 1 do out[i] = out[i] or 0 end
    return out
  end
  local marks = {}
  for i, id in ipairs(wanted) do marks[i] = 'forgot:' .. id end
  for i, mark in ipairs(redis.call('HMGET', meta, unpack(marks))) do
    if mark then return redis.error_reply('FORGOTTEN ' .. wanted[i]) end
  end
  if dedupe == '1' and tonumber(m[7] or '0') > 0 then return redis.error_reply('CHECKARCHIVE') end
end
local last = tonumber(m[2] or '0') + n
local out = {0}
local stamped = {}
local pairs_ = {}
local tokens = 0
for i = 0, n - 1 do
  local seq = last - n + 1 + i
  local payload = ARGV[6 + 4 * i]
  -- bytes 4..11 hold seq as a big-endian uint64 (see models.SEQ_OFFSET)
  stamped[i + 1] = string.sub(payload, 1, 3)
    .. struct.pack('>I4I4', math.floor(seq / 4294967296), seq % 4294967296)
    .. string.sub(payload, 12)
  tokens = tokens + tonumber(ARGV[7 + 4 * i])
  if ARGV[9 + 4 * i] ~= '' then redis.call('HSET', full, ARGV[8 + 4 * i], ARGV[9 + 4 * i]) end
  pairs_[2 * i + 1] = ARGV[8 + 4 * i]
  pairs_[2 * i + 2] = string.format('%d', seq)
  out[i + 2] = seq
end
for i = 1, #stamped, 1000 do  -- unpack() has a stack limit
  redis.call('RPUSH', list, unpack(stamped, i, math.min(i + 999, #stamped)))
end
for i = 1, #pairs_, 1000 do
  redis.call('HSET', ids, unpack(pairs_, i, math.min(i + 999, #pairs_)))
end
local set = {'last_seq', string.format('%d', last),
             'message_count', string.format('%d', tonumber(m[3] or '0') + n),
             'total_tokens', string.format('%d', tonumber(m[4] or '0') + tokens),
             'updated_at', now}
if title ~= '' and (m[5] or '') == '' then
  set[#set + 1] = 'title'
  set[#set + 1] = title
end
if not m[6] then  -- the first unarchived turn: the caller enqueues one flush
  set[#set + 1] = 'pending'
  set[#set + 1] = now
  out[1] = 1
end
redis.call('HSET', meta, unpack(set))
redis.call('ZADD', index, now, sid)
redis.call('ZADD', backlog, 'NX', now, sid)
-- unarchived turns must outlive any TTL: the flush sets the expiry again
redis.call('PERSIST', meta)
redis.call('PERSIST', list)
redis.call('PERSIST', ids)
return out
