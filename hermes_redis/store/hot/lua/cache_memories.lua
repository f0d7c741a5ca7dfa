-- Cache a user's persistent memories unless they changed since the reader saw generation
-- ARGV[1]: a writer that committed meanwhile bumped the generation, and a stale list must
-- not be cached over its change.
-- KEYS: memories, generation   ARGV: generation read, packed memories, ttl
if tonumber(redis.call('GET', KEYS[2]) or '0') ~= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', tonumber(ARGV[3]))
return 1
