-- simpleworkflow 0022: a run's retention is fixed when it is created. A run started
-- without one of its own takes its type's retention of that moment into
-- workflow_run.retention, whoever writes it (the library's inserts look it up
-- themselves; the insert trigger below does it for rows written with plain SQL), so that
-- changing the type's retention later neither deletes its earlier runs sooner nor keeps
-- them longer. A run left without one (its type had none) is kept the sweeper's default.
-- Runs created before this migration keep the old rule, their type's retention as it is
-- when the sweep runs: retention_fixed is false on them and true on every run after
-- (the default changes after the column is added; neither statement rewrites the table).
alter table {schema}workflow_run add column retention_fixed boolean not null default false;
alter table {schema}workflow_run alter column retention_fixed set default true;

create or replace function {schema}workflow_run_notify_insert() returns trigger
language plpgsql as $$
begin
    -- the type's retention, fixed on runs written without one (0022); the library's own
    -- inserts looked it up already, so for them this finds nothing to change. The ids as
    -- an array: the runs found by primary key, never by a join with the whole table.
    update {schema_name}.workflow_run r
    set retention = (select g.retention from {schema_name}.workflow_registry g
                     where g.workflow_name = r.type)
    where r.id = any(array(
        select i.id from inserted_runs i
        join {schema_name}.workflow_registry g on g.workflow_name = i.type
        where i.retention is null and i.retention_fixed and g.retention is not null));
    insert into {schema_name}.workflow_event (workflow_id, event_type, data)
    select id, 'created', jsonb_build_object('type', type, 'priority', priority, 'run_at', run_at)
    from inserted_runs
    order by created_at, id;
    -- one wake-up per type, saying when its earliest new run is due if that is later
    perform pg_notify('simpleworkflow', 'wake ' || tg_table_schema || ' ' || t.type
                                        || case when t.due > now()
                                                then ' ' || extract(epoch from t.due)
                                                else '' end)
    from (select type, min(run_at) as due from inserted_runs
          where status = 'pending' group by type) as t;
    return null;
end
$$;

-- The sweep's candidates without a retention: those created before this migration by
-- type (they follow their type's retention as it is now), the others by finishing time
-- alone (the default). Each range a sweep reads still holds only expired runs.
drop index {schema}idx_workflow_run_expiry_by_type;

create index idx_workflow_run_expiry_by_type
    on {schema}workflow_run (type, updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null and not retention_fixed;

create index idx_workflow_run_expiry_default
    on {schema}workflow_run (updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null and retention_fixed;
