-- simpleworkflow 0023: forks (admin.fork), as Postgres's 0029: the run a run was forked
-- from and the journal entry it was forked at; null on every other run; a partial index
-- of forked runs alone, for the original's list of its forks.
alter table workflow_run add column forked_from text;
alter table workflow_run add column forked_at_step text;
create index idx_workflow_run_forked_from
    on workflow_run (forked_from)
    where forked_from is not null;
