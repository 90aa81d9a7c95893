-- simpleworkflow 0021: values a run publishes, as Postgres's 0027: one row per run and key,
-- replaced by a later set (version counts the sets), deleted with its run.
create table workflow_value (
    run_id     text not null references workflow_run (id) on delete cascade,
    key        text not null,
    value      text not null check (json_valid(value)),
    version    integer not null default 1,
    step_name  text not null,
    updated_at text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    primary key (run_id, key)
);
