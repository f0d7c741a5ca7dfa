-- Remove forgotten messages from the hot list and the counters. Each message is
-- marked in the meta hash first, so running this twice never subtracts twice
-- (invariants 4, 5).
-- KEYS: meta, list   ARGV: message_id, seq, tokens, message_id, seq, tokens, ...
local meta, list = KEYS[1], KEYS[2]
if redis.call('EXISTS', meta) == 0 then return 0 end
local drop, count, tokens = {}, 0, 0
for i = 1, #ARGV, 3 do
  if redis.call('HSETNX', meta, 'forgot:' .. ARGV[i], 1) == 1 then
    count = count + 1
    tokens = tokens + tonumber(ARGV[i + 2])
  end
  drop[tonumber(ARGV[i + 1])] = true
end
local removed = 0
for _, item in ipairs(redis.call('LRANGE', list, 0, -1)) do
  local hi, lo = struct.unpack('>I4I4', item, 4)
  if drop[hi * 4294967296 + lo] then
    redis.call('LREM', list, 1, item)
    removed = removed + 1
  end
end
redis.call('HINCRBY', meta, 'message_count', -count)
redis.call('HINCRBY', meta, 'total_tokens', -tokens)
return removed
