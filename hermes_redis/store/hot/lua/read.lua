-- What context() needs from Redis on a cluster, in one step: the meta, the newest page of
-- the list (as many entries as the budget holds at the session's mean size, as
-- hot.page_size computes it) and, for an active session, the TTL renewed as touch.lua does
-- (invariant 2). One Redis reads all this without Lua (hot.RedisHot._read); a cluster
-- pipeline takes no MULTI, so the cluster reads it here, atomically.
-- The meta is read by field name (HMGET), never whole: the hash also holds a 'forgot:' mark
-- per forgotten message, which a read must not pay for.
-- KEYS: meta, list, ids   ARGV: ttl (-1: do not touch), budget
-- Returns {the FIELDS' values, entries, page size}; {} when there is no session.
-- FIELDS: models.META_FIELDS, in its order (tests/test_redis_hot.py checks they agree).
local FIELDS = {'user_id', 'title', 'created_at', 'updated_at', 'total_tokens', 'message_count',
                'status', 'summary', 'summary_seq', 'last_seq', 'flushed_seq', 'cleared_seq',
                'forgets', 'parent_session_id', 'forked_at_seq'}  -- issue 30: lineage
local meta, list, ids = KEYS[1], KEYS[2], KEYS[3]
local values = redis.call('HMGET', meta, unpack(FIELDS))
local m = {}
for i, name in ipairs(FIELDS) do m[name] = values[i] end
if not m['status'] then return {} end
local ttl = tonumber(ARGV[1])
if ttl >= 0 and m['status'] == 'active' then
  if ttl > 0 and tonumber(m['flushed_seq'] or '0') >= tonumber(m['last_seq'] or '0') then
    redis.call('EXPIRE', meta, ttl)
    redis.call('EXPIRE', list, ttl)
    redis.call('EXPIRE', ids, ttl)
  else
    redis.call('PERSIST', meta)
    redis.call('PERSIST', list)
    redis.call('PERSIST', ids)
  end
end
local count = tonumber(m['message_count'] or '0')
local mean = 64
if count > 0 then mean = math.max(1, tonumber(m['total_tokens'] or '0')) / count end
local page = math.floor(tonumber(ARGV[2]) / (mean + 4) * 1.25) + 8
page = math.max(16, math.min(1024, page))
return {values, redis.call('LRANGE', list, -page, -1), page}
