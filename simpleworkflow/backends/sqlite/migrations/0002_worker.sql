-- simpleworkflow 0002: fencing tokens and lease expiry for workers.

-- A new token at every claim: a worker's writes for a run count only while the run
-- still carries the token it was given.
alter table workflow_run add column lease_token text;

create index idx_workflow_run_lease_expiry
    on workflow_run (lease_until)
    where status = 'leased';
