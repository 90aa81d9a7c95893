-- simpleworkflow 0012: retention. How long a finished run is kept may be chosen when it
-- starts (workflow_run.retention) and for its type (workflow_registry.retention); null
-- means "the next one down", ending at the sweeper's default. Adding nullable columns
-- rewrites nothing.
alter table {schema}workflow_run add column retention interval;
alter table {schema}workflow_registry add column retention interval;

-- The sweeper's candidates, found by index at any size: finished runs with no parent
-- row (a child goes after its parent), those following their type's retention by type
-- and finishing time, those with a retention of their own by that retention. Each range
-- the sweep reads holds only expired runs; pending and leased runs are in neither index.
create index idx_workflow_run_expiry_by_type
    on {schema}workflow_run (type, updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null;

create index idx_workflow_run_expiry_own
    on {schema}workflow_run (retention, updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is not null and parent_id is null;

-- One row per fleet-wide service (the retention sweeper): the worker running it, until
-- when. A worker that stops renewing loses it to the next that asks.
create table {schema}workflow_service_lease (
    name        text primary key,
    holder      text not null,
    lease_until timestamptz not null,
    updated_at  timestamptz not null default now()
);

-- A deleted run's events and journal are found by index. Joined with the table of deleted
-- runs, whose size the planner cannot know, they were read by a hash join over every
-- event and step of every run: a sweep of 1,000 runs beside 200,000 kept took 200 ms,
-- and more as the tables grew.
create or replace function {schema}workflow_run_delete_children() returns trigger
language plpgsql as $$
begin
    delete from {schema_name}.workflow_event
    where workflow_id = any(array(select id from deleted_runs));
    delete from {schema_name}.workflow_step
    where run_id = any(array(select id from deleted_runs));
    return null;
end
$$;
