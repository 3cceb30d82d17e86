-- Watchdog renewal: push the expiry out only while the lock still holds exactly our value.
-- KEYS[1] = lock key; ARGV[1] = our value; ARGV[2] = TTL in milliseconds.
-- Returns 1 when renewed, 0 when the lock is no longer ours (then the holder must stop: the
-- loss signal fires). Renewing without the comparison would extend someone else's lock.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
