-- The API layer's fast path (seed §5.3): "query + placeholder" as one atomic step.
-- Only for servers older than Redis 7.0: newer ones do this step in one command,
-- SET KEYS[1] ARGV[1] NX PX ARGV[2] GET (src/api/fast_path.rs), which 6.x refuses.
-- KEYS[1] = idem:{requestId}; ARGV[1] = our PROCESSING placeholder; ARGV[2] = TTL in ms.
-- Returns the existing value (someone got here first) or '' (we hold first-processing rights).
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ''
