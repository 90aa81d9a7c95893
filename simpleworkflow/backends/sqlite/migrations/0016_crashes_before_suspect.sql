-- simpleworkflow 0016: a run rescued from a dead worker becomes a suspect (isolate, 0005)
-- only after its second crash beside other runs; the first rescue leaves it an ordinary
-- run that any worker claims at once. crashes counts the uncharged crashes since the
-- run's last attempt that ended otherwise (docs/workers.md, "When a worker dies").
-- Suspects marked before this migration keep their mark.
alter table workflow_run add column crashes integer not null default 0;
