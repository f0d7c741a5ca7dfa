-- Append one message: assign the next seq, stamp it into the payload, update counters,
-- index, backlog and TTL, all in one atomic step (invariants 1, 2, 5).
-- KEYS: meta, list, index, backlog, full
-- ARGV: payload, tokens, now, session_id, title, message_id, full_text, is_retry
local meta, list, index, backlog, full = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local status = redis.call('HGET', meta, 'status')
if not status then return redis.error_reply('NOSESSION') end
if status ~= 'active' then return redis.error_reply('STATUS ' .. status) end
if ARGV[8] == '1' then
  -- a retry after a dropped connection: the first attempt may have landed
  for _, item in ipairs(redis.call('LRANGE', list, -64, -1)) do
    if string.sub(item, 14, 45) == ARGV[6] then
      local hi, lo = struct.unpack('>I4I4', item, 4)
      return {hi * 4294967296 + lo, 0}
    end
  end
end
local seq = redis.call('HINCRBY', meta, 'last_seq', 1)
local payload = ARGV[1]
-- bytes 4..11 hold seq as a big-endian uint64 (see models.SEQ_OFFSET)
local stamped = string.sub(payload, 1, 3)
  .. struct.pack('>I4I4', math.floor(seq / 4294967296), seq % 4294967296)
  .. string.sub(payload, 12)
redis.call('RPUSH', list, stamped)
redis.call('HINCRBY', meta, 'message_count', 1)
redis.call('HINCRBY', meta, 'total_tokens', tonumber(ARGV[2]))
redis.call('HSET', meta, 'updated_at', ARGV[3])
if ARGV[5] ~= '' and (redis.call('HGET', meta, 'title') or '') == '' then
  redis.call('HSET', meta, 'title', ARGV[5])
end
if ARGV[7] ~= '' then redis.call('HSET', full, ARGV[6], ARGV[7]) end
redis.call('ZADD', index, ARGV[3], ARGV[4])
redis.call('ZADD', backlog, 'NX', ARGV[3], ARGV[4])
-- unarchived turns must outlive any TTL: the flush sets the expiry again
redis.call('PERSIST', meta)
redis.call('PERSIST', list)
local enqueue = redis.call('HSETNX', meta, 'pending', ARGV[3])
return {seq, enqueue}
