-- simpleworkflow 0029: forks (admin.fork). A run forked from another names it in
-- forked_from and the journal entry it was forked at in forked_at_step; both are null on
-- every other run, and no foreign key (retention may delete the original first). The
-- original lists its forks through a partial index that holds forked runs alone, so a
-- run that is never forked adds no entry to it.
alter table {schema}workflow_run add column forked_from uuid;
alter table {schema}workflow_run add column forked_at_step text;
create index idx_workflow_run_forked_from
    on {schema}workflow_run (forked_from)
    where forked_from is not null;
