-- simpleworkflow 0009: what operators ask. How late each type's queue is (the age of its
-- oldest due pending run) is one probe of this index per type, however long the queue;
-- without it, the answer read every due run. A run's signals are found by run: listing
-- them, and deleting them with their run when finished runs are purged (the foreign
-- key's cascade read the whole table once per run deleted).
create index idx_workflow_run_due
    on {schema}workflow_run (type, run_at)
    where status = 'pending' and deleted_at is null;

create index idx_workflow_signal_run on {schema}workflow_signal (run_id, id);
