-- Install a new summary covering seq <= new_seq (compare-and-set on the old one) and
-- drop from the list head the messages it covers that are already archived (invariant 2).
-- A trimmed entry leaves the id map too (append.lua): the archive answers for it.
-- KEYS: meta, list, ids   ARGV: expected_summary_seq ('*' = any), summary, new_seq ('last' = last_seq),
--   [expected summary text, expected forget count: the summary was built from a state that
--    a forget changed since, so it may hold what was forgotten (invariant 4)]
local meta, list, ids = KEYS[1], KEYS[2], KEYS[3]
if redis.call('EXISTS', meta) == 0 then return -1 end
-- Redis checks maxmemory only at a script's first write: this one frees memory, so it
-- starts with a write that cannot grow it, and still runs when Redis is full.
redis.call('HDEL', meta, 'oom-gate')
local current = tonumber(redis.call('HGET', meta, 'summary_seq') or '0')
if ARGV[1] ~= '*' and tonumber(ARGV[1]) ~= current then return -2 end
if #ARGV >= 5 and ((redis.call('HGET', meta, 'summary') or '') ~= ARGV[4]
    or (redis.call('HGET', meta, 'forgets') or '0') ~= ARGV[5]) then return -2 end
local new_seq
if ARGV[3] == 'last' then
  new_seq = tonumber(redis.call('HGET', meta, 'last_seq') or '0')
else
  new_seq = tonumber(ARGV[3])
end
if new_seq < current and ARGV[1] ~= '*' then return -2 end
redis.call('HSET', meta, 'summary', ARGV[2], 'summary_seq', new_seq)
local flushed = tonumber(redis.call('HGET', meta, 'flushed_seq') or '0')
local bound = math.min(new_seq, flushed)
local trimmed = 0
local high = 0
while true do
  local head = redis.call('LINDEX', list, 0)
  if not head then break end
  -- a corrupted head entry cannot be archived (reads skip it): drop it, say so in the log
  local h = string.sub(head, 1, 1)  -- '\154' / '\155': wire v1 / v2 (models.py)
  if #head >= 11 and (h == '\154' or h == '\155') and string.sub(head, 3, 3) == '\207' then
    local hi, lo = struct.unpack('>I4I4', head, 4)
    if hi * 4294967296 + lo > bound then break end
    redis.call('HDEL', ids, string.sub(head, 14, 45))
    high = hi * 4294967296 + lo
  else
    redis.log(redis.LOG_WARNING, 'hermes: dropped a corrupted entry from ' .. list)
  end
  redis.call('LPOP', list)
  trimmed = trimmed + 1
end
if high > tonumber(redis.call('HGET', meta, 'ids_from') or '0') then
  redis.call('HSET', meta, 'ids_from', high)
end
return trimmed
