-- Append a batch of messages (one, or a whole turn): consecutive seqs stamped into the
-- payloads, counters, index, backlog and TTL updated, all in one atomic step
-- (invariants 1, 2, 5).
-- KEYS: meta, list, index, backlog, full
-- ARGV: now, session_id, title, is_retry, n, then n groups of (payload, tokens, message_id,
--       full_text)
-- Returns {enqueue, seq_1, ..., seq_n}.
local meta, list, index, backlog, full = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now, sid, title, retry, n = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
-- one read and one write of the meta hash: each redis.call costs about a microsecond
local m = redis.call('HMGET', meta, 'status', 'last_seq', 'message_count', 'total_tokens',
                     'title', 'pending')
local status = m[1]
if not status then return redis.error_reply('NOSESSION') end
if status ~= 'active' then return redis.error_reply('STATUS ' .. status) end
if retry == '1' then
  -- a retry after a dropped connection: the first attempt may have landed, all of it
  local want = {}
  for i = 0, n - 1 do want[ARGV[8 + 4 * i]] = i + 2 end
  local out, found = {0}, false
  for _, item in ipairs(redis.call('LRANGE', list, -(64 + n), -1)) do
    local at = want[string.sub(item, 14, 45)]
    if at then
      local hi, lo = struct.unpack('>I4I4', item, 4)
      out[at] = hi * 4294967296 + lo
      found = true
    end
  end
  if found then
    for i = 2, n + 1 do out[i] = out[i] or 0 end
    return out
  end
end
local last = tonumber(m[2] or '0') + n
local out = {0}
local stamped = {}
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
  out[i + 2] = seq
end
for i = 1, #stamped, 1000 do  -- unpack() has a stack limit
  redis.call('RPUSH', list, unpack(stamped, i, math.min(i + 999, #stamped)))
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
return out
