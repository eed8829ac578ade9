-- 0009_max_staleness.sql - bounded staleness (issue 17): the job spec's
-- "max_staleness" (coord.h rm_job_spec_t), used by straggler_policy stale.
-- Jobs stored before this migration have 0 (no policy used it).
ALTER TABLE jobs ADD COLUMN max_staleness INTEGER NOT NULL DEFAULT 0;
