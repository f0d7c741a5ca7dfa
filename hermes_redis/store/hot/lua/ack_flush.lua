-- Record that everything up to ARGV[1] is archived; once nothing is left unarchived,
-- the session leaves the backlog and its keys may expire again (invariant 2).
-- An entry trimmed here leaves the id map too (append.lua): the archive answers for it.
-- KEYS: meta, list, backlog, full, ids   ARGV: upto_seq, ttl, session_id, archived message_id...
local meta, list, backlog, full, ids = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if redis.call('EXISTS', meta) == 0 then return -1 end
-- Redis checks maxmemory only at a script's first write: this one frees memory, so it
-- starts with a write that cannot grow it, and still runs when Redis is full.
redis.call('HDEL', meta, 'oom-gate')
for i = 4, #ARGV do redis.call('HDEL', full, ARGV[i]) end
local upto = tonumber(ARGV[1])
local flushed = tonumber(redis.call('HGET', meta, 'flushed_seq') or '0')
if upto > flushed then
  redis.call('HSET', meta, 'flushed_seq', upto)
  flushed = upto
end
-- archived messages the summary already covers leave the list now: under load a compaction
-- summarizes messages before they are archived and could not trim them then
local bound = math.min(flushed, tonumber(redis.call('HGET', meta, 'summary_seq') or '0'))
local trimmed = 0
while true do
  local head = redis.call('LINDEX', list, 0)
  if not head or #head < 11 then break end
  local h = string.sub(head, 1, 1)  -- '\154' / '\155': wire v1 / v2 (models.py)
  if h ~= '\154' and h ~= '\155' then break end
  local hi, lo = struct.unpack('>I4I4', head, 4)
  if hi * 4294967296 + lo > bound then break end
  redis.call('HDEL', ids, string.sub(head, 14, 45))
  trimmed = hi * 4294967296 + lo
  redis.call('LPOP', list)
end
if trimmed > tonumber(redis.call('HGET', meta, 'ids_from') or '0') then
  redis.call('HSET', meta, 'ids_from', trimmed)
end
local last = tonumber(redis.call('HGET', meta, 'last_seq') or '0')
if flushed >= last then
  redis.call('ZREM', backlog, ARGV[3])
  local ttl = tonumber(ARGV[2])
  if ttl > 0 then
    redis.call('EXPIRE', meta, ttl)
    redis.call('EXPIRE', list, ttl)
    redis.call('EXPIRE', ids, ttl)
  end
end
return last - flushed
