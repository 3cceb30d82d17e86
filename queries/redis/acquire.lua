-- Take a lock and its fence token in one step (idemguard, line of defense 2).
-- KEYS[1] = lock key, e.g. lock:order:{orderNo}
-- KEYS[2] = its fence counter, fence:{lockKey}
-- ARGV[1] = the holder's JSON up to the fence number, ARGV[2] = the rest of it
-- ARGV[3] = TTL in milliseconds
-- Returns {1, fence} when taken, {0, current value, PTTL} when someone else holds it.
--
-- SET NX and INCR run in one script so no holder can ever be seen without its token, and the
-- token is written into the value it guards: tokens strictly increase across holders of a key,
-- which lets the database refuse a writer whose lock expired while it was paused.
local current = redis.call('GET', KEYS[1])
if current then
  return {0, current, redis.call('PTTL', KEYS[1])}
end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. fence .. ARGV[2], 'PX', ARGV[3])
return {1, fence}
