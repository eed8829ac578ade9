-- 0006_aggregation.sql - gradient clipping and Byzantine-robust aggregation
-- (issue 12): the job spec's aggregation method (coord.h rm_job_spec_t;
-- include/ringmaster/aggregation.h names), f, m, clip_norm, tau and
-- iterations. Jobs stored before this migration aggregate by the mean with
-- no clipping.
ALTER TABLE jobs ADD COLUMN aggregation TEXT NOT NULL DEFAULT 'mean';
ALTER TABLE jobs ADD COLUMN aggregation_f INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN aggregation_m INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN clip_norm REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN aggregation_tau REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN aggregation_iterations INTEGER NOT NULL DEFAULT 0;
