-- simpleworkflow 0006: what operators ask, as Postgres's 0009. The oldest due pending run
-- of each type is read from this index alone; a run's signals are found by run, for
-- listing them and for the foreign key's cascade when finished runs are purged.
create index idx_workflow_run_due
    on workflow_run (type, run_at)
    where status = 'pending' and deleted_at is null;

create index idx_workflow_signal_run on workflow_signal (run_id, id);
