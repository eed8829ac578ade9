-- 0004_launch_index.sql - each worker's launch index (issue 5).
-- The launcher's index of the process (RINGMASTER_LAUNCH_INDEX of the local
-- launcher, SLURM_PROCID, Kubernetes' completion index; -1 = started by
-- hand): the N of its log file worker-N.log. It equals the rank only in a
-- job's first generation, so the log link and GET .../workers/{index}/log
-- use this, not the rank. Workers stored before this migration keep -1.
ALTER TABLE workers ADD COLUMN launch_index INTEGER NOT NULL DEFAULT -1;
