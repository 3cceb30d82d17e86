-- Raise a fence counter to at least ARGV[1]; never lowers it.
-- KEYS[1] = fence:{lockKey}. Returns the counter's value afterwards.
-- Used by RedLock after a quorum is reached with different per-node tokens (every node of the
-- quorum is raised to the maximum, so the next quorum, which shares a node with this one,
-- issues a larger token), and by the console's fence bump.
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local wanted = tonumber(ARGV[1])
if current < wanted then
  redis.call('SET', KEYS[1], ARGV[1])
  return wanted
end
return current
