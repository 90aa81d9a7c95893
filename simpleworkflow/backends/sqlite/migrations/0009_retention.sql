-- simpleworkflow 0009: retention, as Postgres's 0012. How long a finished run is kept
-- may be chosen when it starts (workflow_run.retention, seconds) and for its type
-- (workflow_registry.retention); null means "the next one down", ending at the sweeper's
-- default.
alter table workflow_run add column retention real;
alter table workflow_registry add column retention real;

-- The sweeper's candidates, found by index: finished runs with no parent row (a child
-- goes after its parent), by type and finishing time, or by their own retention.
create index idx_workflow_run_expiry_by_type
    on workflow_run (type, updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null;

create index idx_workflow_run_expiry_own
    on workflow_run (retention, updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is not null and parent_id is null;

-- One row per fleet-wide service (the retention sweeper): the worker running it, until
-- when. A worker that stops renewing loses it to the next that asks.
create table workflow_service_lease (
    name        text primary key,
    holder      text not null,
    lease_until text not null,
    updated_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
