-- Remove forgotten messages from the hot list and the counters. Each message is
-- marked in the meta hash first, so running this twice never subtracts twice
-- (invariants 4, 5). A forgotten tool result's full text (kept until archived) goes too.
-- The id leaves the id map; its 'forgot:' mark refuses a retry with it (append.lua).
-- KEYS: meta, list, full, ids   ARGV: message_id, seq, tokens, message_id, seq, tokens, ...
local meta, list, full, ids = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', meta) == 0 then return 0 end
-- Redis checks maxmemory only at a script's first write: this one frees memory, so it
-- starts with a write that cannot grow it, and still runs when Redis is full.
redis.call('HDEL', meta, 'oom-gate')
local drop, count, tokens = {}, 0, 0
for i = 1, #ARGV, 3 do
  if redis.call('HSETNX', meta, 'forgot:' .. ARGV[i], 1) == 1 then
    count = count + 1
    tokens = tokens + tonumber(ARGV[i + 2])
  end
  drop[tonumber(ARGV[i + 1])] = true
  redis.call('HDEL', full, ARGV[i])
  redis.call('HDEL', ids, ARGV[i])
end
local removed = 0
for _, item in ipairs(redis.call('LRANGE', list, 0, -1)) do
  -- a corrupted entry (too short or another header) is no target: skip it, never fail
  local h = string.sub(item, 1, 1)  -- '\154' / '\155': wire v1 / v2 (models.py)
  local ok = #item >= 11 and (h == '\154' or h == '\155') and string.sub(item, 3, 3) == '\207'
  local hi, lo = 0, 0
  if ok then hi, lo = struct.unpack('>I4I4', item, 4) end
  if ok and drop[hi * 4294967296 + lo] then
    redis.call('LREM', list, 1, item)
    removed = removed + 1
  end
end
-- a compaction that read the session before this forget must not install its summary
if count > 0 then  -- (-0 would reach Redis as "-0", not an integer: a repeat would fail)
  redis.call('HINCRBY', meta, 'forgets', 1)
  redis.call('HINCRBY', meta, 'message_count', -count)
  redis.call('HINCRBY', meta, 'total_tokens', -tokens)
end
return removed
