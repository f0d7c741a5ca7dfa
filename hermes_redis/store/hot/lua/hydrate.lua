-- Rebuild an expired session's hot keys from the archive, unless another process already
-- did (or the session came back by itself): never overwrite live state.
-- The id map starts empty: every message loaded is archived, and 'ids_from' (the highest
-- seq now) sends a retry of an older id to the archive (append.lua).
-- KEYS: meta, list, index, ids   ARGV: ttl, updated_at, session_id, n_fields, field, value, ..., entries...
local meta, list, index, ids = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if redis.call('EXISTS', meta) == 1 then return 0 end
local n = tonumber(ARGV[4])
for i = 5, 4 + 2 * n, 2 do
  redis.call('HSET', meta, ARGV[i], ARGV[i + 1])
end
local last = tonumber(redis.call('HGET', meta, 'last_seq') or '0')
if last > 0 then redis.call('HSET', meta, 'ids_from', last) end
redis.call('DEL', list)
redis.call('DEL', ids)
for i = 5 + 2 * n, #ARGV do
  redis.call('RPUSH', list, ARGV[i])
end
local ttl = tonumber(ARGV[1])
if ttl > 0 then
  redis.call('EXPIRE', meta, ttl)
  redis.call('EXPIRE', list, ttl)
end
redis.call('ZADD', index, ARGV[2], ARGV[3])
return 1
