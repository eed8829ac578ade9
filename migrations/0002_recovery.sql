-- 0002_recovery.sql - fault recovery (issue 6).
-- One row per checkpoint that EVERY member of a generation completed; the
-- newest row of a job is what a replacement or restarted worker loads.
-- Written in the same transaction as the step report that completed it, so
-- a checkpoint the coordinator acknowledged survives a coordinator SIGKILL.
CREATE TABLE checkpoints (
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  step INTEGER NOT NULL,
  generation INTEGER NOT NULL,
  world INTEGER NOT NULL,
  time_ms INTEGER NOT NULL,
  PRIMARY KEY (job_id, step)
);
