-- simpleworkflow 0014: cron schedules (see docs/schedules.md). A schedule starts a run of
-- its workflow type at every tick of its cron expression, in its time zone. Every worker
-- may run the scheduler: each reads the due schedules by index, starts each due tick's
-- run (keyed by schedule and tick) and moves next_tick_at on only if no other scheduler
-- did first, so a tick starts one run however many schedulers race for it.
create table {schema}workflow_schedule (
    name          text primary key,
    workflow_type text not null,
    cron          text not null,
    timezone      text not null default 'UTC',
    -- the static payload; each run gets it with "schedule" and "scheduled_for" added
    payload       jsonb not null default '{}'::jsonb,
    -- what to do about ticks no scheduler started within a minute: skip, once, each
    missed        text not null default 'skip'
                  constraint workflow_schedule_missed_check
                  check (missed in ('skip', 'once', 'each')),
    priority      integer not null default 100,
    max_attempts  integer
                  constraint workflow_schedule_max_attempts_check check (max_attempts >= 1),
    paused        boolean not null default false,
    -- the next tick to start, in UTC; null: not planned yet (a row inserted with plain
    -- SQL), the next scheduler plans the first tick after its now
    next_tick_at  timestamptz,
    -- the latest tick a run was started for
    last_tick_at  timestamptz,
    -- declared by @app.schedule: written again by every worker of the app when it starts
    in_code       boolean not null default false,
    -- why the scheduler paused it: a cron expression or time zone it cannot read
    error         text,
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now()
);

-- The scheduler's one query: the schedules due (or not planned yet), earliest first.
create index idx_workflow_schedule_due
    on {schema}workflow_schedule (next_tick_at)
    where not paused;
