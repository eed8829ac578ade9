-- 0007_step_time.sql - the wall-clock time (ms) a step summary was written,
-- so the recent steps a restarted coordinator reloads into its window
-- (core/job.c rm__job_load_active) carry their time like live samples.
-- Rows written before this migration read 0 (time unknown).
ALTER TABLE step_summaries ADD COLUMN time_ms INTEGER NOT NULL DEFAULT 0;
