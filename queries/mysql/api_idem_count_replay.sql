UPDATE {{idempotency_record}} SET replay_count = replay_count + ? WHERE request_id = ?
