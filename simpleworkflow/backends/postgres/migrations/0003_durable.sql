-- simpleworkflow 0003: durable execution: the step journal, stored signals, suspension,
-- child workflows, deadlines and code versions.

alter table {schema}workflow_run
    add column waiting_for  jsonb,
    add column parent_id    uuid references {schema}workflow_run (id) on delete set null,
    add column deadline     timestamptz,
    add column code_version text;

-- Cancelling a parent finds its children through this index.
create index idx_workflow_run_parent
    on {schema}workflow_run (parent_id)
    where parent_id is not null;

-- One row per completed step (and per step still retrying, to count its attempts).
create table {schema}workflow_step (
    run_id       uuid not null references {schema}workflow_run (id) on delete cascade,
    step_name    text not null,
    kind         text not null default 'step',
    position     integer not null,
    status       text not null default 'completed'
                 constraint workflow_step_status_check check (status in ('completed', 'retrying')),
    output       jsonb,
    attempts     integer not null default 1,
    started_at   timestamptz not null default now(),
    completed_at timestamptz,
    primary key (run_id, step_name)
);

-- Signals are kept until a wait consumes them, oldest first.
create table {schema}workflow_signal (
    id          bigint generated always as identity primary key,
    run_id      uuid not null references {schema}workflow_run (id) on delete cascade,
    event       text not null,
    payload     jsonb not null default '{}'::jsonb,
    created_at  timestamptz not null default now(),
    consumed_at timestamptz,
    step_name   text
);

create index idx_workflow_signal_pending
    on {schema}workflow_signal (run_id, event, id)
    where consumed_at is null;

-- The created event comes from the insert itself, so that runs written with plain SQL
-- by any producer have the same audit trail as runs started through a client.
create or replace function {schema}workflow_run_notify_insert() returns trigger
language plpgsql as $$
begin
    insert into {schema_name}.workflow_event (workflow_id, event_type, data)
    select id, 'created', jsonb_build_object('type', type, 'priority', priority, 'run_at', run_at)
    from inserted_runs
    order by created_at, id;
    -- one wake-up per type, saying when its earliest new run is due
    perform pg_notify('simpleworkflow', 'wake ' || tg_table_schema || ' ' || t.type
                                        || ' ' || extract(epoch from t.due))
    from (select type, min(run_at) as due from inserted_runs
          where status = 'pending' group by type) as t;
    return null;
end
$$;
