-- simpleworkflow 0005: runs rescued from an expired lease are suspects. A worker that
-- dies takes every run it held with it, and only one of them may be the cause: each is
-- marked (isolate) and claimed alone until one of its attempts ends without a crash, so
-- that a run that kills its worker every time is charged for its own crashes and no one
-- else's. The index holds only the due suspects, a handful at most.
alter table workflow_run add column isolate integer not null default 0;

create index idx_workflow_run_suspects
    on workflow_run (priority, run_at)
    where status = 'pending' and isolate and deleted_at is null;
