-- The outcome of an audited action (done / refused / changed / error), on its attempt row.
UPDATE {{ops_audit}} SET after_state = ?, outcome = ?, detail = ? WHERE id = ?
