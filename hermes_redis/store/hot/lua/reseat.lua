-- Redis went back in time (an older snapshot, a lagging replica) and handed out seqs the
-- archive already holds. Put the archived messages Redis lost back in place and move every
-- entry from the first reused seq on past the archive's highest, in order, atomically:
-- no seq is ever reused for different content, and appends continue above it.
-- The id map follows the moved entries and holds the restored ones.
-- KEYS: meta, list, ids   ARGV: first_reused_seq, archive_high_seq, gap_tokens, gap entries...
-- Returns how many entries were renumbered (-1: no such session).
local meta, list, ids = KEYS[1], KEYS[2], KEYS[3]
if redis.call('EXISTS', meta) == 0 then return -1 end
local first, high = tonumber(ARGV[1]), tonumber(ARGV[2])
local function seq_of(item)
  local hi, lo = struct.unpack('>I4I4', item, 4)
  return hi * 4294967296 + lo
end
local items = redis.call('LRANGE', list, 0, -1)
local out, moved = {}, {}
for _, item in ipairs(items) do
  if seq_of(item) < first then out[#out + 1] = item else moved[#moved + 1] = item end
end
for i = 4, #ARGV do
  out[#out + 1] = ARGV[i]
  redis.call('HSET', ids, string.sub(ARGV[i], 14, 45), seq_of(ARGV[i]))
end
local seq = high
for _, item in ipairs(moved) do
  seq = seq + 1
  out[#out + 1] = string.sub(item, 1, 3)
    .. struct.pack('>I4I4', math.floor(seq / 4294967296), seq % 4294967296)
    .. string.sub(item, 12)
  redis.call('HSET', ids, string.sub(item, 14, 45), seq)
end
redis.call('DEL', list)
for i = 1, #out, 1000 do  -- unpack() has a stack limit
  redis.call('RPUSH', list, unpack(out, i, math.min(i + 999, #out)))
end
if seq > tonumber(redis.call('HGET', meta, 'last_seq') or '0') then
  redis.call('HSET', meta, 'last_seq', seq)
end
redis.call('HINCRBY', meta, 'message_count', #ARGV - 3)
redis.call('HINCRBY', meta, 'total_tokens', tonumber(ARGV[3]))
if redis.call('TTL', meta) < 0 then
  redis.call('PERSIST', list)
  redis.call('PERSIST', ids)
end
return #moved
