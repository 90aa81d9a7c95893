-- The schema after every migration, in one file. A test checks that migrating an empty
-- database from 0001 gives exactly this.

create table workflow_run (
    id              text primary key default (
                        lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' ||
                        substr(lower(hex(randomblob(2))), 2) || '-' ||
                        substr('89ab', 1 + (abs(random()) % 4), 1) ||
                        substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6)))),
    type            text not null,
    payload         text not null default '{}' check (json_valid(payload)),
    status          text not null default 'pending'
                    check (status in ('pending', 'leased', 'succeeded', 'failed', 'cancelled')),
    priority        integer not null default 100,
    run_at          text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    idempotency_key text,
    attempt         integer not null default 0,
    max_attempts    integer not null default 3 check (max_attempts >= 1),
    leased_by       text,
    lease_until     text,
    last_error      text,
    result          text check (result is null or json_valid(result)),
    created_at      text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at      text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    deleted_at      text,
    lease_token     text,
    waiting_for     text check (waiting_for is null or json_valid(waiting_for)),
    parent_id       text references workflow_run (id) on delete set null,
    deadline        text,
    code_version    text,
    -- a suspect: claimed alone until an attempt ends otherwise than by a crash (0005, 0016)
    isolate         integer not null default 0,
    -- W3C trace context of the start, and of the attempt that last gave the run back (0008)
    trace_context   text check (trace_context is null or json_valid(trace_context)),
    -- seconds kept after it finished; null: its type's retention, else the default (0009)
    retention       real,
    -- a debounced start's key, while the run is pending and unclaimed (0010)
    debounce_key    text,
    -- runs of one key (a customer, say) share their type's per-key limit (0012)
    concurrency_key text,
    -- uncharged crashes beside other runs since an attempt last ended otherwise; the
    -- second makes the run a suspect (0016)
    crashes         integer not null default 0,
    -- retention was fixed when the run was created (0017): its own, else its type's of
    -- that moment, else (null) the sweeper's default; 0 on runs created before 0017
    -- without one, which follow their type's retention as it is when swept
    retention_fixed integer not null default 1,
    -- status changes whose event their writer logged itself; the trigger logs the rest
    -- (0018)
    logged_changes  integer not null default 0,
    -- continue-as-new (0020): the run that carried this one on, and the run this one
    -- carries on; null on every other run, not indexed (followed by primary key)
    continued_as    text,
    continued_from  text
);

create index idx_workflow_run_claim
    on workflow_run (priority, run_at)
    where status = 'pending' and deleted_at is null;

-- SQLite uses an index for LIKE 'prefix%' when case_sensitive_like is on (the backend sets it).
create index idx_workflow_run_type_prefix on workflow_run (type);

create unique index idx_workflow_run_idempotency on workflow_run (idempotency_key);

create index idx_workflow_run_deleted_at
    on workflow_run (deleted_at)
    where deleted_at is not null;

create index idx_workflow_run_created on workflow_run (created_at desc, id desc);

create table workflow_event (
    id          integer primary key autoincrement,
    workflow_id text not null references workflow_run (id) on delete cascade,
    event_type  text not null,
    data        text not null default '{}' check (json_valid(data)),
    created_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

create index idx_workflow_event_workflow on workflow_event (workflow_id, id);

create table workflow_registry (
    workflow_name text primary key,
    intent_type   text not null default 'workflow',
    runtime       text not null,
    is_enabled    integer not null default 1,
    description   text,
    created_at    text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at    text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    -- seconds its runs are kept after they finish, unless they chose; null: the default
    retention     real,
    -- at most this many of its runs leased at once, in all, and per concurrency key (0012)
    concurrency     integer
                    constraint workflow_registry_concurrency_check check (concurrency >= 1),
    key_concurrency integer
                    constraint workflow_registry_key_concurrency_check check (key_concurrency >= 1),
    -- the rate limit its claims obey (workflow_rate_limit.name), if any (0013)
    rate_limit      text
);

create index idx_workflow_run_lease_expiry
    on workflow_run (lease_until)
    where status = 'leased';

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

create index idx_workflow_run_versioned
    on workflow_run (type, code_version, run_at)
    where status = 'pending' and deleted_at is null and code_version is not null;

create index idx_workflow_run_suspects
    on workflow_run (priority, run_at)
    where status = 'pending' and isolate and deleted_at is null;

create index idx_workflow_run_due
    on workflow_run (type, run_at)
    where status = 'pending' and deleted_at is null;

create index idx_workflow_signal_run on workflow_signal (run_id, id);

-- Subscriptions of workflow types to topic patterns (migration 0007): publishing an event
-- starts one run of each type a pattern of which matches its topic.
create table workflow_subscription (
    pattern       text not null,
    workflow_type text not null,
    priority      integer not null default 100,
    max_attempts  integer check (max_attempts >= 1),
    created_at    text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at    text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    -- the pattern as a LIKE pattern: '*' and '#' become '%', '_' is escaped
    topic_like    text not null generated always as (
                      replace(replace(replace(pattern, '_', '\_'), '*', '%'), '#', '%')) stored,
    -- the number of segments a matching topic has; null after a last '#' (one or more)
    segments      integer generated always as (
                      case when substr(pattern, length(pattern)) = '#' then null
                           else length(pattern) - length(replace(pattern, '.', '')) + 1
                      end) stored,
    primary key (pattern, workflow_type)
);

-- The retention sweeper's candidates and its lease (migration 0009; the indexes of runs
-- without a retention are at the end, 0017).
create index idx_workflow_run_expiry_own
    on workflow_run (retention, updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is not null and parent_id is null;

create table workflow_service_lease (
    name        text primary key,
    holder      text not null,
    lease_until text not null,
    updated_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

-- Cron schedules (migration 0011): each due tick of a schedule starts one run, keyed by
-- the schedule's name and the tick.
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

-- Outcomes by time, for the dashboard's throughput chart (migration 0014).
create index idx_workflow_event_outcomes
    on workflow_event (created_at)
    where event_type in ('succeeded', 'failed', 'retried');

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

-- A run written without a retention takes its type's of that moment (migration 0017).
create trigger workflow_run_retention_fixed
after insert on workflow_run
when new.retention is null and new.retention_fixed
     and (select g.retention from workflow_registry g where g.workflow_name = new.type
          and typeof(g.retention) in ('integer', 'real')) is not null
begin
    update workflow_run
    set retention = (select g.retention from workflow_registry g
                     where g.workflow_name = new.type)
    where id = new.id;
end;

-- Debounce (migration 0010): one pending, unclaimed run per type and key; the key is
-- cleared as the run stops being pending.
create unique index idx_workflow_run_debounce
    on workflow_run (type, debounce_key)
    where status = 'pending' and deleted_at is null and debounce_key is not null;

create trigger workflow_run_debounce_closed
after update of status on workflow_run
when old.debounce_key is not null and new.status <> 'pending'
begin
    update workflow_run set debounce_key = null where id = new.id;
end;

-- Concurrency limits (migration 0012).
-- One counter per limited type (concurrency_key '') and per key of a type limited per
-- key: how many of its runs are leased (held), and how many may be (capacity). Writers
-- are serialised, so the claim reads them as they are; the triggers below count every
-- lease that starts or ends, whatever statement (in whatever language) wrote it.
create table workflow_concurrency (
    workflow_name   text not null,
    concurrency_key text not null,
    held            integer not null default 0,
    capacity        integer not null default 1,
    primary key (workflow_name, concurrency_key)
);

-- The claim steps over full types and keys through this small index.
create index idx_workflow_concurrency_full
    on workflow_concurrency (workflow_name, concurrency_key)
    where held >= capacity;

create trigger workflow_run_lease_taken
after update of status on workflow_run
when new.status = 'leased' and old.status <> 'leased'
begin
    insert into workflow_concurrency (workflow_name, concurrency_key, held, capacity)
    select g.workflow_name, '', 1, g.concurrency
    from workflow_registry g
    where g.workflow_name = new.type and g.concurrency is not null
    union all
    select g.workflow_name, new.concurrency_key, 1, g.key_concurrency
    from workflow_registry g
    where g.workflow_name = new.type and g.key_concurrency is not null
      and new.concurrency_key is not null
    on conflict (workflow_name, concurrency_key)
    do update set held = held + 1, capacity = excluded.capacity;
end;

create trigger workflow_run_lease_ended
after update of status on workflow_run
when old.status = 'leased' and new.status <> 'leased'
begin
    update workflow_concurrency set held = max(held - 1, 0)
    where workflow_name = old.type
      and concurrency_key in ('', coalesce(old.concurrency_key, ''));
end;

create trigger workflow_run_leased_deleted
after delete on workflow_run
when old.status = 'leased'
begin
    update workflow_concurrency set held = max(held - 1, 0)
    where workflow_name = old.type
      and concurrency_key in ('', coalesce(old.concurrency_key, ''));
end;

-- Rate limits (migration 0013): named limits, and the current window of each.
create table workflow_rate_limit (
    name        text primary key,
    max_runs    integer not null
                constraint workflow_rate_limit_max_runs_check check (max_runs >= 1),
    period      real not null
                constraint workflow_rate_limit_period_check check (period > 0),
    per_key     integer not null default 0,
    created_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

-- The current window of each limit (and key): when it opened (a multiple of the period
-- since the epoch), how many claims it let through, and how many the last claim got.
create table workflow_rate_window (
    name         text not null,
    rate_key     text not null,
    window_start text not null,
    used         integer not null default 0,
    granted      integer not null default 0,
    primary key (name, rate_key)
);

-- Worker presence (migration 0015): one row per worker process, upserted once per
-- heartbeat interval; live until seen_until, stopped_at set by a graceful stop.
create table workflow_worker (
    worker_id     text primary key,
    host          text not null,
    pid           integer not null,
    runtime       text not null default 'python',
    type_prefixes text not null default '[]',
    concurrency   integer,
    version       text,
    started_at    text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    last_seen_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    seen_until    text not null,
    stopped_at    text
);
create index idx_workflow_worker_seen_until on workflow_worker (seen_until);

-- The retention sweeper's candidates without a retention (migration 0017): runs created
-- before 0017 by type (their type's retention as it is now), the others by finishing
-- time alone (the default).
create index idx_workflow_run_expiry_by_type
    on workflow_run (type, updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null and not retention_fixed;

create index idx_workflow_run_expiry_default
    on workflow_run (updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null and retention_fixed;

-- Every change of a run's status leaves its event (migration 0018): the library's
-- statements write their own and add one to logged_changes; any other gets one here.
create trigger workflow_run_log_change
after update of status on workflow_run
when new.status is not old.status and new.logged_changes = old.logged_changes
begin
    insert into workflow_event (workflow_id, event_type, data)
    values (
        new.id,
        case when new.status <> 'pending' then new.status
             when old.status <> 'leased' then 'retried_by_operator'
             when new.attempt > old.attempt then 'retried'
             else 'released' end,
        -- a patch onto {} drops the members that are null
        json_patch('{}', json_object(
            'source', 'sql',
            'from', old.status,
            'worker_id', coalesce(new.leased_by, old.leased_by),
            'attempt', case when new.status in ('leased', 'succeeded') then new.attempt + 1
                            when new.status = 'failed' or new.attempt > old.attempt
                            then new.attempt end,
            'lease_until', case when new.status = 'leased' and new.lease_until is not null
                                then replace(new.lease_until, ' ', 'T') || '+00:00' end,
            'retry_at', case when new.status = 'pending' and old.status = 'leased'
                                  and new.attempt > old.attempt
                             then replace(new.run_at, ' ', 'T') || '+00:00' end,
            'error', json(case when new.status in ('failed', 'pending')
                                    and new.last_error is not old.last_error
                               then json_object('message', new.last_error) end))));
end;

-- Dashboard logouts (migration 0019): a logged-out session's nonce, kept until the
-- session would have expired, so that every process refuses its cookie.
create table workflow_dashboard_logout (
    nonce          text primary key,
    expires_at     text not null,
    logged_out_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
create index idx_workflow_dashboard_logout_expires_at
    on workflow_dashboard_logout (expires_at);

-- Values a run publishes (migration 0021, ctx.set_value): one row per run and key,
-- replaced by a later set of the same key; version counts the sets.
create table workflow_value (
    run_id     text not null references workflow_run (id) on delete cascade,
    key        text not null,
    value      text not null check (json_valid(value)),
    version    integer not null default 1,
    step_name  text not null,
    updated_at text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    primary key (run_id, key)
);

-- Streams (migration 0022).
create table workflow_stream_item (
    run_id      text not null references workflow_run (id) on delete cascade,
    stream_key  text not null,
    position    integer not null,
    origin      text not null,
    origin_seq  integer not null,
    value       text check (value is null or json_valid(value)),
    closed      integer not null default 0,
    created_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    primary key (run_id, stream_key, position)
);
create unique index idx_workflow_stream_item_origin
    on workflow_stream_item (run_id, stream_key, origin, origin_seq);

-- Forks (migration 0023, admin.fork): the run a run was forked from and the journal
-- entry it was forked at; null on every other run. The partial index holds forked runs
-- alone: the original's list of its forks.
alter table workflow_run add column forked_from text;
alter table workflow_run add column forked_at_step text;
create index idx_workflow_run_forked_from
    on workflow_run (forked_from)
    where forked_from is not null;
