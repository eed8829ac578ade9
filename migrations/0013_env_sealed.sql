-- 0013_env_sealed.sql - a job's env values at rest (store_key.c ENV): the
-- env column keeps the keys with every value replaced by "***", so no read
-- of the table shows a value; the packed "KEY=VALUE" list lives in env_sealed
-- (hex of list XOR pad(K, env_salt)) with env_mac (hex HMAC-SHA-256 under K
-- of salt and sealed bytes) so a wrong key or an edited row is noticed.
-- Rows stored before this migration are sealed by the sweep at open, which
-- erases the plaintext (secure_delete) and truncates the WAL.
ALTER TABLE jobs ADD COLUMN env_salt TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN env_sealed TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN env_mac TEXT NOT NULL DEFAULT '';
