-- 0008_deterministic.sql - bitwise reproducible jobs (issue 11): the job
-- spec's "deterministic" (coord.h rm_job_spec_t). Jobs stored before this
-- migration are not deterministic.
ALTER TABLE jobs ADD COLUMN deterministic INTEGER NOT NULL DEFAULT 0;
