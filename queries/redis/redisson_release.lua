-- Release a Redisson RLock the operator saw, and wake its waiters.
-- KEYS[1] = the lock (a hash: field `<clientId>:<threadId>` = reentrancy count)
-- KEYS[2] = redisson_lock__channel:{name}
-- ARGV[1] = the field seen; ARGV[2] = the count seen; ARGV[3] = Redisson's unlock message (0)
-- Deletes only while the hash holds exactly that one field with that count: a holder that
-- re-entered since (count changed) or another thread that took it (another field) keeps it.
-- Then publishes the unlock message Redisson's own unlock script publishes, so clients blocked
-- in lock() retry at once instead of sleeping until their timeout.
-- Returns {1} when deleted, {0, what it holds now (field=count), or false when gone}.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, false}
end
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return {0, 'not a hash'}
end
local all = redis.call('HGETALL', KEYS[1])
local now = {}
for i = 1, #all, 2 do
  now[#now + 1] = all[i] .. '=' .. all[i + 1]
end
if #all ~= 2 or all[1] ~= ARGV[1] or all[2] ~= ARGV[2] then
  return {0, table.concat(now, ',')}
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], ARGV[3])
return {1}
