-- tollgate reset: forget a (policy, key) or an attempts counter, penalty included.
-- KEYS  every key of the state (the state hash and, for the sliding log, its sorted set; or the
--       attempts counter); they share one hash tag
-- Returns the number of keys removed.

return redis.call('DEL', unpack(KEYS))
