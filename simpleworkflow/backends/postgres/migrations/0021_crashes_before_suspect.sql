-- simpleworkflow 0021: a run rescued from a dead worker becomes a suspect (isolate, 0008)
-- only after its second crash beside other runs; the first rescue leaves it an ordinary
-- run that any worker claims at once. crashes counts the uncharged crashes since the
-- run's last attempt that ended otherwise (docs/workers.md, "When a worker dies").
-- A constant default rewrites nothing (Postgres 11+). Suspects marked before this
-- migration keep their mark.
alter table {schema}workflow_run add column crashes integer not null default 0;
