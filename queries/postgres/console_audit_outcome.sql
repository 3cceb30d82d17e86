-- The outcome of an audited action (done / refused / changed / error), on its attempt row.
UPDATE {{ops_audit}} SET after_state = $1, outcome = $2, detail = $3 WHERE id = $4
