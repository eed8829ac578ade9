-- 0001_initial.sql - the coordinator's first schema.
-- Applied once, in one transaction, when PRAGMA user_version < 1.
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  world_size INTEGER NOT NULL,
  min_workers INTEGER NOT NULL,
  max_workers INTEGER NOT NULL,
  algorithm TEXT NOT NULL,
  dtype TEXT NOT NULL,
  workload TEXT NOT NULL,
  workload_options TEXT NOT NULL,
  steps INTEGER NOT NULL,
  launcher TEXT NOT NULL,
  heartbeat_timeout_ms INTEGER NOT NULL,
  barrier_timeout_ms INTEGER NOT NULL,
  on_failure TEXT NOT NULL,
  max_restarts INTEGER NOT NULL,
  straggler_policy TEXT NOT NULL,
  backup_workers INTEGER NOT NULL,
  checkpoint_every INTEGER NOT NULL,
  state INTEGER NOT NULL,
  token TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '',
  generation INTEGER NOT NULL DEFAULT 0,
  world INTEGER NOT NULL DEFAULT 0,
  step INTEGER NOT NULL DEFAULT 0,
  restarts INTEGER NOT NULL DEFAULT 0,
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL DEFAULT 0,
  finished_ms INTEGER NOT NULL DEFAULT 0,
  updated_ms INTEGER NOT NULL
);
CREATE INDEX jobs_state ON jobs(state, id);

CREATE TABLE workers (
  id INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  rank INTEGER NOT NULL DEFAULT -1,
  host TEXT NOT NULL,
  data_addr TEXT NOT NULL,
  devices TEXT NOT NULL,
  state INTEGER NOT NULL,
  generation INTEGER NOT NULL DEFAULT 0,
  joined_ms INTEGER NOT NULL,
  last_heartbeat_ms INTEGER NOT NULL,
  step INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX workers_job ON workers(job_id, id);

CREATE TABLE generations (
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  generation INTEGER NOT NULL,
  world INTEGER NOT NULL,
  formed_ms INTEGER NOT NULL,
  start_step INTEGER NOT NULL,
  peers TEXT NOT NULL, -- one "rank worker_id host data_addr" line per rank
  PRIMARY KEY (job_id, generation)
);

CREATE TABLE barriers (
  id INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  generation INTEGER NOT NULL,
  name TEXT NOT NULL,
  state INTEGER NOT NULL, -- 1 released, 2 broken
  opened_ms INTEGER NOT NULL,
  closed_ms INTEGER NOT NULL,
  arrived INTEGER NOT NULL,
  expected INTEGER NOT NULL,
  reason TEXT NOT NULL,
  missing TEXT NOT NULL -- space-separated ranks
);
CREATE INDEX barriers_job ON barriers(job_id, id);

CREATE TABLE step_summaries (
  id INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  rank INTEGER NOT NULL,
  generation INTEGER NOT NULL,
  first_step INTEGER NOT NULL,
  last_step INTEGER NOT NULL,
  count INTEGER NOT NULL,
  mean_step_ms REAL NOT NULL,
  max_step_ms REAL NOT NULL,
  mean_compute_ms REAL NOT NULL,
  mean_comm_ms REAL NOT NULL,
  mean_wait_ms REAL NOT NULL,
  last_loss REAL,
  last_accuracy REAL,
  allreduce_bytes INTEGER NOT NULL
);
CREATE INDEX step_summaries_job ON step_summaries(job_id, rank, last_step);

CREATE TABLE events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id INTEGER NOT NULL,
  time_ms INTEGER NOT NULL,
  kind TEXT NOT NULL,
  rank INTEGER NOT NULL,
  generation INTEGER NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX events_job ON events(job_id, seq);
