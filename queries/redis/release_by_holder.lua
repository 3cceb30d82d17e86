-- Compare-and-delete when the fence number in our value is not known: a RedLock node that did
-- not answer in time may still have taken our SET, with a fence of its own. The value is
-- ARGV[1] .. <digits> .. ARGV[2]; the two parts carry this acquisition's nonce, so nothing but
-- our own value can match.
-- KEYS[1] = lock key; returns {1} when deleted, {0, current value or nil} otherwise.
local current = redis.call('GET', KEYS[1])
if current then
  local head, tail = ARGV[1], ARGV[2]
  if #current > #head + #tail
     and string.sub(current, 1, #head) == head
     and string.sub(current, -#tail) == tail
     and string.match(string.sub(current, #head + 1, #current - #tail), '^%d+$') then
    redis.call('DEL', KEYS[1])
    return {1}
  end
end
return {0, current}
