-- 0011_secure_aggregation.sql - secure aggregation (issue 13): the job
-- spec's "secure_aggregation" object flattened (coord.h rm_job_spec_t
-- secagg_*; secagg_bits 0 = off) and the job's counters of re-formations a
-- secure job recovered from (secure_recovered_steps, secure_dropouts).
-- Jobs stored before this migration are plain (0, ''). Barrier payloads
-- (the protocol's public keys) are never stored: the barriers table keeps
-- only outcomes (core/barrier.c).
ALTER TABLE jobs ADD COLUMN secagg_bits INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN secagg_clip REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN secagg_scale REAL NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN secagg_threshold INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN secagg_neighbours TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN secure_recovered_steps INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN secure_dropouts INTEGER NOT NULL DEFAULT 0;
