-- simpleworkflow 0003: durable execution: the step journal, stored signals, suspension,
-- child workflows, deadlines and code versions.

alter table workflow_run add column waiting_for text check (waiting_for is null or json_valid(waiting_for));
alter table workflow_run add column parent_id text references workflow_run (id) on delete set null;
alter table workflow_run add column deadline text;
alter table workflow_run add column code_version text;

create index idx_workflow_run_parent
    on workflow_run (parent_id)
    where parent_id is not null;

create table workflow_step (
    run_id       text not null references workflow_run (id) on delete cascade,
    step_name    text not null,
    kind         text not null default 'step',
    position     integer not null,
    status       text not null default 'completed'
                 check (status in ('completed', 'retrying')),
    output       text check (output is null or json_valid(output)),
    attempts     integer not null default 1,
    started_at   text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    completed_at text,
    primary key (run_id, step_name)
);

create table workflow_signal (
    id          integer primary key autoincrement,
    run_id      text not null references workflow_run (id) on delete cascade,
    event       text not null,
    payload     text not null default '{}' check (json_valid(payload)),
    created_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    consumed_at text,
    step_name   text
);

create index idx_workflow_signal_pending
    on workflow_signal (run_id, event, id)
    where consumed_at is null;

-- The created event comes from the insert itself, so that runs written with plain SQL
-- have the same audit trail as runs started through a client.
create trigger workflow_run_created
after insert on workflow_run
begin
    insert into workflow_event (workflow_id, event_type, data)
    values (new.id, 'created',
            json_object('type', new.type, 'priority', new.priority,
                        'run_at', replace(new.run_at, ' ', 'T') || '+00:00'));
end;
