-- simpleworkflow 0004: an index for the worker's report of runs whose code version it
-- lacks (unknown_versions). Without it the report read every pending run of the worker's
-- types under the process's one connection: ~0.2 s with 1,000,000 due runs, during which
-- the worker could neither claim nor record outcomes. A run has a code version only once
-- it has been claimed, so pending runs that were never claimed stay out of this index.
create index idx_workflow_run_versioned
    on workflow_run (type, code_version, run_at)
    where status = 'pending' and deleted_at is null and code_version is not null;
