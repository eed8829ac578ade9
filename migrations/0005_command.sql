-- 0005_command.sql - command jobs (issue 9): the user's program.
-- command and env are packed lists (NUL-terminated strings back to back,
-- coord.h rm_job_spec_t), stored as BLOBs because they contain NULs; their
-- counts are the NULs in the blob. workdir is the program's working
-- directory. Jobs stored before this migration have none.
ALTER TABLE jobs ADD COLUMN command BLOB NOT NULL DEFAULT x'';
ALTER TABLE jobs ADD COLUMN env BLOB NOT NULL DEFAULT x'';
ALTER TABLE jobs ADD COLUMN workdir TEXT NOT NULL DEFAULT '';
