-- simpleworkflow 0027: values a run publishes (ctx.set_value, docs/durable.md). One row per
-- run and key, replaced by a later set of the same key (version counts the sets); each
-- set is journaled and logged as a value_set event in the same transaction. Runs that
-- publish no value write no row; the foreign key deletes a run's values with it, and its
-- check locks the run only for a set (rare), not for any hot statement.
create table {schema}workflow_value (
    run_id     uuid not null references {schema}workflow_run (id) on delete cascade,
    key        text not null,
    value      jsonb not null,
    version    integer not null default 1,
    step_name  text not null,
    updated_at timestamptz not null default now(),
    primary key (run_id, key)
);
