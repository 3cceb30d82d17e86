-- Remove our placeholder only if it is still ours (compare-and-delete), so a failed request
-- never leaves a key that answers "in progress" until its TTL.
-- KEYS[1] = idem:{requestId}; ARGV[1] = the exact placeholder we set.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
