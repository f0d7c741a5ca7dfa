-- Set meta fields of a live session only: a session that expired or was dropped meanwhile
-- must not come back as a hash holding just these fields (with no TTL).
-- KEYS: meta   ARGV: field, value, field, value, ...
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
