UPDATE {{idempotency_record}} SET replay_count = replay_count + $1 WHERE request_id = $2
