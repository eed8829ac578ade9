-- 0012_transports.sql - data-plane transports (issue 14): what each worker
-- offers besides its TCP data_addr, as the Join request carried it
-- (common/rm_transports.h: "shm:<host>/<nonce> tcp"). A coordinator that
-- restarts hands the same offers to every member, so each pair keeps the
-- transport it had. Workers stored before this migration offered TCP only
-- ('' reads as "tcp").
ALTER TABLE workers ADD COLUMN transports TEXT NOT NULL DEFAULT '';
