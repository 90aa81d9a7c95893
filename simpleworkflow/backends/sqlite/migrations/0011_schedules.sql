-- simpleworkflow 0011: cron schedules, as Postgres's 0014 (see docs/schedules.md). Times
-- are UTC text as elsewhere; next_tick_at null: not planned yet, the next scheduler plans it.
create table workflow_schedule (
    name          text primary key,
    workflow_type text not null,
    cron          text not null,
    timezone      text not null default 'UTC',
    payload       text not null default '{}',
    missed        text not null default 'skip' check (missed in ('skip', 'once', 'each')),
    priority      integer not null default 100,
    max_attempts  integer check (max_attempts >= 1),
    paused        integer not null default 0,
    next_tick_at  text,
    last_tick_at  text,
    in_code       integer not null default 0,
    error         text,
    created_at    text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at    text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

create index idx_workflow_schedule_due
    on workflow_schedule (next_tick_at)
    where not paused;
