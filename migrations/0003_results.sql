-- 0003_results.sql - job results (issue 5).
-- workers.result: the summary JSON object the worker's workload sent with
-- its Leave call ('' = none), validated by coordinator/json_check.c and at
-- most RM_COORD_RESULT_MAX - 1 bytes. jobs.result: the result chosen when
-- the job succeeded (the lowest rank of its final generation that sent one,
-- result_rank; coordinator/result.c), '' while it has none.
ALTER TABLE workers ADD COLUMN result TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN result TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN result_rank INTEGER NOT NULL DEFAULT -1;
