-- Renew an active session's TTL on a read, keeping invariant 2: only a fully archived
-- session may expire, so its keys get the TTL again; while any turn is unarchived (or the
-- TTL is 0) they keep none. A session in any other status is left as it is.
-- KEYS: meta, list, ids   ARGV: ttl (seconds; 0: never expire)
-- Returns 1 when the session is active, else 0. (One Redis reads the rest of the context
-- natively beside this, in the same MULTI: hot.RedisHot._read.)
local m = redis.call('HMGET', KEYS[1], 'status', 'flushed_seq', 'last_seq')
if m[1] ~= 'active' then return 0 end
local ttl = tonumber(ARGV[1])
if ttl > 0 and tonumber(m[2] or '0') >= tonumber(m[3] or '0') then
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[2], ttl)
  redis.call('EXPIRE', KEYS[3], ttl)
else
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
  redis.call('PERSIST', KEYS[3])
end
return 1
