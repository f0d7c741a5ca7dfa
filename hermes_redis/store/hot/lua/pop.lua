-- Forget one message the caller found newest (pop): marked in the meta hash first, so of
-- concurrent pops of one message exactly one gets it, and the counters move once
-- (invariants 4, 5). The newest is the list's last entry, checked first: O(1) then. Its
-- full text, if a tool result kept one until archived, goes too.
-- The id leaves the id map; its 'forgot:' mark refuses a retry with it (append.lua).
-- KEYS: meta, list, full, ids   ARGV: message_id, seq, tokens
-- Returns 1 when this call forgot it, 0 when it was forgotten already (or no session).
local meta, list, full, ids = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', meta) == 0 then return 0 end
-- Redis checks maxmemory only at a script's first write: this one frees memory, so it
-- starts with a write that cannot grow it, and still runs when Redis is full.
redis.call('HDEL', meta, 'oom-gate')
if redis.call('HSETNX', meta, 'forgot:' .. ARGV[1], 1) == 0 then return 0 end
redis.call('HDEL', full, ARGV[1])
redis.call('HDEL', ids, ARGV[1])
local want = tonumber(ARGV[2])
local function seq_of(item)
  local h = string.sub(item, 1, 1)  -- '\154' / '\155': wire v1 / v2 (models.py)
  if #item < 11 or (h ~= '\154' and h ~= '\155') or string.sub(item, 3, 3) ~= '\207' then
    return -1  -- a corrupted entry is no target
  end
  local hi, lo = struct.unpack('>I4I4', item, 4)
  return hi * 4294967296 + lo
end
local tail = redis.call('LINDEX', list, -1)
if tail and seq_of(tail) == want then
  redis.call('RPOP', list)
else  -- appended to meanwhile (or only in the archive): look for it
  for _, item in ipairs(redis.call('LRANGE', list, 0, -1)) do
    if seq_of(item) == want then
      redis.call('LREM', list, 1, item)
      break
    end
  end
end
-- a compaction that read the session before this pop must not install its summary
redis.call('HINCRBY', meta, 'forgets', 1)
redis.call('HINCRBY', meta, 'message_count', -1)
local tokens = tonumber(ARGV[3])
if tokens > 0 then redis.call('HINCRBY', meta, 'total_tokens', -tokens) end  -- never "-0"
return 1
