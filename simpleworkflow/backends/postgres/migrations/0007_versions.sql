-- simpleworkflow 0007: an index for the worker's report of due runs whose code version
-- it lacks (unknown_versions, run when a worker starts and every five minutes). Without
-- it the report counted every due pending run through the claim index: with a backlog of
-- 1,000,000 runs, a long query beside the worker's claims. A run has a code version only
-- once it has been claimed, so only runs that were claimed and are pending again (asleep,
-- waiting, retrying) are in this index.
create index idx_workflow_run_versioned
    on {schema}workflow_run (type, code_version, run_at)
    where status = 'pending' and deleted_at is null and code_version is not null;
