-- 0010_token_verifier.sql - worker tokens are not stored in plain text
-- (issue 11). A job row keeps, instead of its token (coordinator/store/
-- store_key.c has the formulas and the key file <db>.key):
--   token_salt      hex of 16 random bytes, new for every token
--   token_sealed    hex of token XOR HMAC-SHA-256 pad(K, salt)
--   token_verifier  hex SHA-256(token): what a presented token is checked
--                   against, in constant time
-- The token column (NOT NULL since 0001) stays and holds ''. SQL cannot
-- compute either value, so rows stored before this migration are converted
-- by the store in C right after it (store_key.c SWEEP, every start): each
-- plaintext token is sealed with the key file's K, its verifier written and
-- its column emptied (secure_delete on, then the WAL is truncated). Jobs
-- submitted before the upgrade, running ones included, keep their token and
-- can still be relaunched.
ALTER TABLE jobs ADD COLUMN token_salt TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN token_sealed TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN token_verifier TEXT NOT NULL DEFAULT '';
