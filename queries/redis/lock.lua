-- The lock operations of idemguard (line of defense 2), one function per rule.
--
-- One call runs a list of operations, in order, atomically: the client coalesces the lock
-- operations that many callers send to one node at the same moment into one call, so a storm
-- of acquisitions costs the server one script call per batch instead of one per lock.
-- Encoding: ARGV holds each operation's name followed by its arguments; KEYS holds its keys in
-- the same order. The reply is one entry per operation.

-- Fence counters expire (one counter per request was left forever, 2,400 keys per
-- node after 1,200 orders). A counter that is gone restarts at the seed the client sends, its
-- clock in microseconds, not at 1: every token issued earlier came from a counter seeded at an
-- earlier clock and raised by one per acquisition, so the restarted one is above all of them as
-- long as clocks disagree by less than the counter's lifetime. So the database, which keeps the
-- largest token it saw on each row for ever, never refuses the next holder of a key whose counter
-- expired, and a holder paused past that expiry is still refused. The client sends the seed
-- (rather than the script reading TIME) so that RedLock nodes seeded by one acquisition agree on
-- its token and hold the same value.
-- keep_fence: the counter lives at least `keep_ms` more (never shortened; a counter without TTL,
-- left by an older version, gets one).
local function keep_fence(fence_key, keep_ms)
  local pttl = redis.call('PTTL', fence_key)
  if pttl == -1 or pttl < tonumber(keep_ms) then
    redis.call('PEXPIRE', fence_key, keep_ms)
  end
end

-- next_fence: the next token of a key (seeded when the counter is gone), kept `keep_ms` more.
-- INCR first: an answer of 1 means the counter was gone (a live one is at least its seed), and
-- it is replaced by seed + 1 with its TTL in the same SET. With `fresh` (the caller's hint that
-- the lock key is new, as a request lock's is) SET NX first: a counter that is gone is started
-- at seed + 1 with its TTL in one command, and only a counter that exists is INCR'ed. Either
-- order gives the same token; the hint only saves a command for the case it names.
local function next_fence(fence_key, seed, keep_ms, fresh)
  if fresh == '1' then
    local first = tonumber(seed) + 1
    if redis.call('SET', fence_key, string.format('%d', first), 'NX', 'PX', keep_ms) then
      return first
    end
  end
  local fence = redis.call('INCR', fence_key)
  if fence == 1 then
    fence = tonumber(seed) + 1
    redis.call('SET', fence_key, string.format('%d', fence), 'PX', keep_ms)
    return fence
  end
  keep_fence(fence_key, keep_ms)
  return fence
end

-- acquire KEYS: lock, fence:{lock}  ARGV: head, tail, ttl_ms, seed, fence_keep_ms, fresh
-- Takes the lock and its fence token in one step. The value is head .. fence .. tail (the
-- holder's compact JSON), so the token is written into the value it guards; tokens strictly
-- increase across holders of a key, which lets the database refuse a writer whose lock expired
-- while it was paused. The counter outlives the lock by `fence_keep_ms`. Returns {1, fence}
-- when taken, {0, current value, PTTL} when held.
local function acquire(key, fence_key, head, tail, ttl_ms, seed, fence_keep_ms, fresh)
  local current = redis.call('GET', key)
  if current then
    return {0, current, redis.call('PTTL', key)}
  end
  local fence = next_fence(fence_key, seed, tonumber(ttl_ms) + tonumber(fence_keep_ms), fresh)
  -- '%d': Lua's own number-to-text writes a 16-digit token as 1.7645e+15.
  redis.call('SET', key, head .. string.format('%d', fence) .. tail, 'PX', ttl_ms)
  return {1, fence}
end

-- release KEYS: lock  ARGV: exact value
-- Compare-and-delete: deletes only while the lock holds exactly this value (a plain DEL is how
-- one worker deletes the next worker's lock after its own expired). Returns {1} when deleted,
-- {0, current value or nil} when it was not ours.
local function release(key, value)
  local current = redis.call('GET', key)
  if current == value then
    redis.call('DEL', key)
    return {1}
  end
  return {0, current}
end

-- release_delex: the same with the server's own DELEX key IFEQ value (Redis 8.4+).
local function release_delex(key, value)
  if redis.call('DELEX', key, 'IFEQ', value) == 1 then
    return {1}
  end
  return {0, redis.call('GET', key)}
end

-- release_by_holder KEYS: lock  ARGV: head, tail
-- Compare-and-delete when our fence number is not known: a RedLock node that did not answer
-- in time may still have taken our SET with a fence of its own. Only head .. digits .. tail
-- matches, and head/tail carry this acquisition's nonce: nothing but our own value matches.
local function release_by_holder(key, head, tail)
  local current = redis.call('GET', key)
  if current and #current > #head + #tail
     and string.sub(current, 1, #head) == head
     and string.sub(current, -#tail) == tail
     and string.match(string.sub(current, #head + 1, #current - #tail), '^%d+$') then
    redis.call('DEL', key)
    return {1}
  end
  return {0, current}
end

-- renew KEYS: lock, fence:{lock}  ARGV: exact value, ttl_ms, fence_keep_ms
-- Watchdog renewal: pushes the expiry out only while the lock holds exactly our value (else the
-- holder must stop: the loss signal fires), and keeps the fence counter alive past the lock.
-- Returns 1 when renewed, 0 when not ours.
local function renew(key, fence_key, value, ttl_ms, fence_keep_ms)
  if redis.call('GET', key) == value then
    keep_fence(fence_key, tonumber(ttl_ms) + tonumber(fence_keep_ms))
    return redis.call('PEXPIRE', key, ttl_ms)
  end
  return 0
end

-- raise_fence KEYS: fence:{lock}  ARGV: at least, keep_ms
-- Raises a fence counter, never lowers it; returns its value afterwards. RedLock raises every
-- node of a quorum to the quorum's token (so the next quorum, which shares a node with it,
-- issues a larger one).
local function raise_fence(fence_key, at_least, keep_ms)
  local current = tonumber(redis.call('GET', fence_key) or '0')
  if current < tonumber(at_least) then
    redis.call('SET', fence_key, at_least)
    current = tonumber(at_least)
  end
  keep_fence(fence_key, keep_ms)
  return current
end

-- bump_fence KEYS: fence:{lock}  ARGV: seed, keep_ms
-- The console's fence bump after a forced release: the next token, seeded like an acquisition's
-- (a plain INCR of an expired counter would answer 1).
local function bump_fence(fence_key, seed, keep_ms)
  return next_fence(fence_key, seed, keep_ms, '0')
end

-- One failing operation (say, a fence key someone overwrote with text) must not fail the
-- others of its batch: each runs protected and fails alone as {-1, message}.
local function run(fn, ...)
  local ok, result = pcall(fn, ...)
  if ok then
    return result
  end
  return {-1, type(result) == 'table' and result.err or tostring(result)}
end

local out, k, a = {}, 1, 1
while a <= #ARGV do
  local op = ARGV[a]
  if op == 'acquire' then
    out[#out + 1] = run(acquire, KEYS[k], KEYS[k + 1], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6])
    k, a = k + 2, a + 7
  elseif op == 'release' then
    out[#out + 1] = run(release, KEYS[k], ARGV[a + 1])
    k, a = k + 1, a + 2
  elseif op == 'release_delex' then
    out[#out + 1] = run(release_delex, KEYS[k], ARGV[a + 1])
    k, a = k + 1, a + 2
  elseif op == 'release_by_holder' then
    out[#out + 1] = run(release_by_holder, KEYS[k], ARGV[a + 1], ARGV[a + 2])
    k, a = k + 1, a + 3
  elseif op == 'renew' then
    out[#out + 1] = run(renew, KEYS[k], KEYS[k + 1], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3])
    k, a = k + 2, a + 4
  elseif op == 'raise_fence' then
    out[#out + 1] = run(raise_fence, KEYS[k], ARGV[a + 1], ARGV[a + 2])
    k, a = k + 1, a + 3
  elseif op == 'bump_fence' then
    out[#out + 1] = run(bump_fence, KEYS[k], ARGV[a + 1], ARGV[a + 2])
    k, a = k + 1, a + 3
  else
    return redis.error_reply('idemguard lock.lua: unknown operation ' .. tostring(op))
  end
end
return out
