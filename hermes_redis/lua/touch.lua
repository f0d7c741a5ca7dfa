-- Activity renews the TTL, but only a fully archived session may expire (invariant 2).
-- KEYS: meta, list   ARGV: ttl
local meta, list = KEYS[1], KEYS[2]
if redis.call('EXISTS', meta) == 0 then return 0 end
local ttl = tonumber(ARGV[1])
local flushed = tonumber(redis.call('HGET', meta, 'flushed_seq') or '0')
local last = tonumber(redis.call('HGET', meta, 'last_seq') or '0')
if ttl > 0 and flushed >= last then
  redis.call('EXPIRE', meta, ttl)
  redis.call('EXPIRE', list, ttl)
else
  redis.call('PERSIST', meta)
  redis.call('PERSIST', list)
end
return 1
