-- Compare-and-delete: release a lock only while it still holds exactly this value.
-- KEYS[1] = lock key; ARGV[1] = the exact value the holder wrote (or the operator saw).
-- Returns {1} when deleted, {0, current value or nil} when it was not ours (expired, or taken
-- over by another holder): a plain DEL here is how one worker deletes the next worker's lock.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return {1}
end
return {0, current}
