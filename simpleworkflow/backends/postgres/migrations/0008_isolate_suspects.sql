-- simpleworkflow 0008: runs rescued from an expired lease are suspects. A worker that
-- dies takes every run it held with it, and only one of them may be the cause: each is
-- marked (isolate) and claimed alone until one of its attempts ends without a crash, so
-- that a run that kills its worker every time is charged for its own crashes and no one
-- else's. Adding a column with a constant default rewrites nothing (Postgres 11+); the
-- index holds only the due suspects, a handful at most.
alter table {schema}workflow_run add column isolate boolean not null default false;

create index idx_workflow_run_suspects
    on {schema}workflow_run (priority, run_at)
    where status = 'pending' and isolate and deleted_at is null;
