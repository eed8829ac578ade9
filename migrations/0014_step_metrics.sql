-- 0014_step_metrics.sql - the named metrics a program reports with its
-- steps (perplexity, learning rate, ...), kept like last_loss: each step
-- summary row holds the last value of every metric reported in its window
-- of steps, so the REST API and the dashboard still have them after the
-- coordinator restarts. One "name value" line per metric (the value as
-- %.17g, so it reads back exactly; names have no spaces, common/
-- rm_metrics.c); '' none. Rows written before this migration read ''.
ALTER TABLE step_summaries ADD COLUMN last_metrics TEXT NOT NULL DEFAULT '';
