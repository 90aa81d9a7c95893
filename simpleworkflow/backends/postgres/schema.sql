-- The schema after every migration, in one file. A test checks that migrating an empty
-- database from 0001 gives exactly this.
create schema if not exists {schema_name};

-- A UUID version 7 (RFC 9562): 48 bits of Unix milliseconds, then random bits.
create function {schema}workflow_uuid_v7() returns uuid
language sql volatile parallel safe as $$
    select encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    placing substring(int8send((extract(epoch from clock_timestamp()) * 1000)::bigint)
                                      from 3)
                    from 1 for 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

create table {schema}workflow_run (
    -- time-ordered ids (migration 0005): new runs append to the indexes keyed by id
    id              uuid primary key default {schema}workflow_uuid_v7(),
    type            text not null,
    payload         jsonb not null default '{}'::jsonb,
    status          text not null default 'pending'
                    constraint workflow_run_status_check
                    check (status in ('pending', 'leased', 'succeeded', 'failed', 'cancelled')),
    priority        integer not null default 100,
    run_at          timestamptz not null default now(),
    idempotency_key text,
    attempt         integer not null default 0,
    max_attempts    integer not null default 3
                    constraint workflow_run_max_attempts_check check (max_attempts >= 1),
    leased_by       text,
    lease_until     timestamptz,
    last_error      text,
    result          jsonb,
    created_at      timestamptz not null default now(),
    updated_at      timestamptz not null default now(),
    deleted_at      timestamptz,
    lease_token     uuid,
    waiting_for     jsonb,
    parent_id       uuid references {schema}workflow_run (id) on delete set null,
    deadline        timestamptz,
    code_version    text,
    -- a suspect: claimed alone until an attempt ends otherwise than by a crash (0008, 0021)
    isolate         boolean not null default false,
    -- W3C trace context of the start, and of the attempt that last gave the run back (0011)
    trace_context   jsonb,
    -- kept this long after it finished; null: its type's retention, else the default (0012)
    retention       interval,
    -- a debounced start's key, while the run is pending and unclaimed (0013)
    debounce_key    text,
    -- runs of one key (a customer, say) share their type's per-key limit (0015)
    concurrency_key text,
    -- the statement that ended the last lease counted it in its concurrency counters
    -- itself, so the lease-counting trigger skips it; the claim clears it (0020)
    lease_returned  boolean not null default false,
    -- uncharged crashes beside other runs since an attempt last ended otherwise; the
    -- second makes the run a suspect (0021)
    crashes         integer not null default 0,
    -- retention was fixed when the run was created (0022): its own, else its type's of
    -- that moment, else (null) the sweeper's default; false on runs created before 0022,
    -- which follow their type's retention as it is when swept. No default: a row
    -- inserted without it gets it from workflow_run_fix_retention
    retention_fixed boolean not null,
    -- status changes whose event their writer logged itself; the trigger logs the rest
    -- (0023)
    logged_changes  integer not null default 0,
    -- continue-as-new (0026): the run that carried this one on, and the run this one
    -- carries on; null on every other run, not indexed (followed by primary key)
    continued_as    uuid,
    continued_from  uuid
);

-- Claims read only claimable rows, ordered by priority then by when they became due:
-- the partial index holds no finished run, and a run whose run_at lies in the future
-- sorts after every due run of its priority, so a claim never steps over them.
create index idx_workflow_run_claim
    on {schema}workflow_run (priority, run_at)
    where status = 'pending' and deleted_at is null;

create index idx_workflow_run_type_prefix
    on {schema}workflow_run (type text_pattern_ops);

-- Unique, and not partial, so that `on conflict (idempotency_key)` infers it as written.
create unique index idx_workflow_run_idempotency
    on {schema}workflow_run (idempotency_key);

create index idx_workflow_run_deleted_at
    on {schema}workflow_run (deleted_at)
    where deleted_at is not null;

-- The worker's report of due runs on code versions it lacks reads only runs that have
-- a code version (migration 0007).
create index idx_workflow_run_versioned
    on {schema}workflow_run (type, code_version, run_at)
    where status = 'pending' and deleted_at is null and code_version is not null;

-- Listings page newest first.
create index idx_workflow_run_created
    on {schema}workflow_run (created_at desc, id desc);

create table {schema}workflow_event (
    id          bigint generated always as identity primary key,
    -- no foreign key: the run's delete trigger removes these rows (migration 0004)
    workflow_id uuid not null,
    event_type  text not null,
    data        jsonb not null default '{}'::jsonb,
    created_at  timestamptz not null default now()
);

create index idx_workflow_event_workflow on {schema}workflow_event (workflow_id, id);

create table {schema}workflow_registry (
    workflow_name text primary key,
    intent_type   text not null default 'workflow',
    runtime       text not null,
    is_enabled    boolean not null default true,
    description   text,
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now(),
    -- how long its runs are kept after they finish, unless they chose; null: the default
    retention     interval,
    -- at most this many of its runs leased at once, in all, and per concurrency key (0015)
    concurrency     integer
                    constraint workflow_registry_concurrency_check check (concurrency >= 1),
    key_concurrency integer
                    constraint workflow_registry_key_concurrency_check check (key_concurrency >= 1),
    -- the rate limit its claims obey (workflow_rate_limit.name), if any (0016)
    rate_limit      text
);


-- Expired leases are found without reading pending or finished runs.
create index idx_workflow_run_lease_expiry
    on {schema}workflow_run (lease_until)
    where status = 'leased';

-- Wake-ups for idle workers, for rows written by any client in any language:
-- channel 'simpleworkflow', payload 'wake <schema> <type>' for runs due now,
-- 'wake <schema> <type> <due, epoch seconds>' for runs due later (a worker's clock is
-- never compared with the database's for work that is due), or 'cancel <schema> <run id>'.
-- The created event comes from the insert itself, so that runs written with plain SQL
-- by any producer have the same audit trail as runs started through a client.
create function {schema}workflow_run_notify_insert() returns trigger
language plpgsql as $$
begin
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

create trigger workflow_run_notify_insert
    after insert on {schema}workflow_run
    referencing new table as inserted_runs
    for each statement execute function {schema}workflow_run_notify_insert();

create function {schema}workflow_run_notify_update() returns trigger
language plpgsql as $$
begin
    if new.status = 'cancelled' then
        perform pg_notify('simpleworkflow', 'cancel ' || tg_table_schema || ' ' || new.id);
    else
        perform pg_notify('simpleworkflow', 'wake ' || tg_table_schema || ' ' || new.type
                                            || case when new.run_at > now()
                                                    then ' ' || extract(epoch from new.run_at)
                                                    else '' end);
    end if;
    return null;
end
$$;

-- Only transitions a worker must hear about call the function: a run becoming pending
-- (or due earlier), and a leased run being cancelled.
create trigger workflow_run_notify_update
    after update on {schema}workflow_run
    for each row
    when ((new.status = 'pending' and (old.status <> 'pending' or new.run_at < old.run_at))
          or (new.status = 'cancelled' and old.status = 'leased'))
    execute function {schema}workflow_run_notify_update();

-- Suspects (runs rescued from a dead worker) are claimed alone, found through this
-- small index (migration 0008).
create index idx_workflow_run_suspects
    on {schema}workflow_run (priority, run_at)
    where status = 'pending' and isolate and deleted_at is null;

-- Cancelling a parent finds its children through this index.
create index idx_workflow_run_parent
    on {schema}workflow_run (parent_id)
    where parent_id is not null;

-- The age of each type's oldest due pending run: one probe per type (migration 0009).
create index idx_workflow_run_due
    on {schema}workflow_run (type, run_at)
    where status = 'pending' and deleted_at is null;

-- One row per completed step (and per step still retrying, to count its attempts).
create table {schema}workflow_step (
    -- no foreign key: the run's delete trigger removes these rows (migration 0004)
    run_id       uuid not null,
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

-- A run's signals, for listing them and deleting them with their run (migration 0009).
create index idx_workflow_signal_run on {schema}workflow_signal (run_id, id);

-- Subscriptions of workflow types to topic patterns (migration 0010): publishing an event
-- starts one run of each type a pattern of which matches its topic.
create table {schema}workflow_subscription (
    pattern       text not null,
    workflow_type text not null,
    -- the start options of the runs it starts
    priority      integer not null default 100,
    max_attempts  integer
                  constraint workflow_subscription_max_attempts_check check (max_attempts >= 1),
    created_at    timestamptz not null default now(),
    updated_at    timestamptz not null default now(),
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

-- Audit and journal rows go with their run (in place of foreign keys, which would lock
-- the run for every row inserted), found by index: a hash join of the deleted runs with
-- the whole table read every event and step of every run (migration 0012).
create function {schema}workflow_run_delete_children() returns trigger
language plpgsql as $$
begin
    delete from {schema_name}.workflow_event
    where workflow_id = any(array(select id from deleted_runs));
    delete from {schema_name}.workflow_step
    where run_id = any(array(select id from deleted_runs));
    return null;
end
$$;

create trigger workflow_run_delete_children
    after delete on {schema}workflow_run
    referencing old table as deleted_runs
    for each statement execute function {schema}workflow_run_delete_children();

-- The retention sweeper's candidates (migrations 0012, 0022): finished runs with no
-- parent row, by the retention fixed at their start; without one, by finishing time (the
-- default), or, created before 0022, by type and finishing time (their type's retention
-- as it is now). Every range a sweep reads holds only expired runs, however many are
-- kept (see docs/retention.md).
create index idx_workflow_run_expiry_by_type
    on {schema}workflow_run (type, updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null and not retention_fixed;

create index idx_workflow_run_expiry_default
    on {schema}workflow_run (updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null and retention_fixed;

create index idx_workflow_run_expiry_own
    on {schema}workflow_run (retention, updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is not null and parent_id is null;

-- One row per fleet-wide service (the retention sweeper): the worker running it, until
-- when (migration 0012).
create table {schema}workflow_service_lease (
    name        text primary key,
    holder      text not null,
    lease_until timestamptz not null,
    updated_at  timestamptz not null default now()
);

-- Debounce (migration 0013, docs/flow-control.md): one pending, unclaimed run per type
-- and key, which later debounced starts update in place (`on conflict ... do update`
-- names this index); the key is cleared as the run stops being pending, whoever writes
-- the row.
create unique index idx_workflow_run_debounce
    on {schema}workflow_run (type, debounce_key)
    where status = 'pending' and deleted_at is null and debounce_key is not null;

create function {schema}workflow_run_debounce_closed() returns trigger
language plpgsql as $$
begin
    new.debounce_key := null;
    return new;
end
$$;

create trigger workflow_run_debounce_closed
    before update on {schema}workflow_run
    for each row
    when (old.debounce_key is not null and new.status <> 'pending')
    execute function {schema}workflow_run_debounce_closed();

-- Cron schedules (migration 0014): each due tick of a schedule starts one run, keyed by
-- the schedule's name and the tick, whichever worker's scheduler starts it.
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

-- Concurrency limits (migrations 0015, 0018, 0020, 0025).
-- One counter per limited type (concurrency_key '') and per key of a type limited per
-- key, in two rows: the leases its claims took (taken, here) and the leases that ended
-- (returned, in workflow_concurrency_returned); held = taken - returned, and capacity is
-- the limit. A counter exists for every limited type, from the moment its limit is set,
-- and for every key of a type limited per key that has pending or leased runs: the insert
-- trigger below creates it, and so does setting a limit. The claim locks
-- its candidates' taken rows in key order and reads them at their newest version (select
-- ... for update), so no two claims can both take the last slot; it reads returned
-- without a lock, as its snapshot saw it: a stale returned is too low, so the claim sees
-- too many leases held and at worst claims less than it could, never more. Every lease
-- that ends is counted in the returned row only (by the outcome statements, else by the
-- update trigger below): claims and completions never wait on each other.
create table {schema}workflow_concurrency (
    workflow_name   text not null,
    concurrency_key text not null,
    taken           integer not null default 0,
    capacity        integer not null default 1,
    -- full when its last claim counted it (for the index below): a flag that rarely
    -- changes, so that a claim's update of taken is a HOT update (0020)
    is_full         boolean not null default false,
    primary key (workflow_name, concurrency_key)
) with (fillfactor = 50);

create table {schema}workflow_concurrency_returned (
    workflow_name   text not null,
    concurrency_key text not null,
    returned        integer not null default 0,
    primary key (workflow_name, concurrency_key)
) with (fillfactor = 50);

-- The claim steps over full types and keys by a hashed look-up of this small index, the
-- counters full when their last claim counted them; it rereads returned for these few.
-- A counter freed since is looked at again. Its predicate is a flag, not the counts:
-- an index whose predicate reads a column makes every update of that column a non-HOT
-- one (a new entry in the primary key too), and taken changes at every claim.
create index idx_workflow_concurrency_full
    on {schema}workflow_concurrency (workflow_name, concurrency_key)
    where is_full;

-- The counter of a new key of a type limited per key, whoever inserts the run (0025). A
-- type's own counter ('') exists from the moment its limit is set, so only a key's can be
-- new at an insert; the WHEN clause calls the function for rows with a key only, and a
-- start without one pays nothing here. The library's create_runs inserts in key order:
-- two batches that bring the same new keys take their counters in the same order.
create function {schema}workflow_run_count_key() returns trigger
language plpgsql as $$
begin
    with counter as (
        insert into {schema_name}.workflow_concurrency (workflow_name, concurrency_key, capacity)
        select g.workflow_name, new.concurrency_key, g.key_concurrency
        from {schema_name}.workflow_registry g
        where g.workflow_name = new.type and g.key_concurrency is not null
        on conflict do nothing
        returning workflow_name, concurrency_key
    )
    insert into {schema_name}.workflow_concurrency_returned (workflow_name, concurrency_key)
    select workflow_name, concurrency_key from counter
    on conflict do nothing;
    return null;
end
$$;

create trigger workflow_run_count_key
    after insert on {schema}workflow_run
    for each row
    when (new.concurrency_key is not null)
    execute function {schema}workflow_run_count_key();

-- The claim counts the leases it takes (it holds the counters locked, and adds to each
-- once), and the library's outcome statements (succeed_runs, fail_runs, release_runs,
-- suspend_runs) count the leases they end, once per counter per statement, marking those
-- runs lease_returned (0020). Every other path that ends a lease (cancellation, a retry
-- or purge by an operator; deleting a leased run; a plain-SQL update from another
-- runtime) is counted here, whoever wrote it in whatever language. Only those rows call
-- the function; for a type without a limit it is an index probe that finds no counter.
-- (A statement trigger, counting each counter once per statement from transition tables,
-- cost every update of workflow_run the copy of its rows: a third of the drain rate of
-- types without limits. A per-row call of this function for every lease end cost a
-- tenth of the drain of a type limited per key.)
create function {schema}workflow_run_count_leases() returns trigger
language plpgsql as $$
begin
    update {schema_name}.workflow_concurrency_returned
    set returned = returned + 1
    where workflow_name = old.type
      and concurrency_key in ('', coalesce(old.concurrency_key, ''));
    return null;
end
$$;

create trigger workflow_run_count_leases
    after update of status on {schema}workflow_run
    for each row
    when (old.status = 'leased' and new.status <> 'leased' and not new.lease_returned)
    execute function {schema}workflow_run_count_leases();

create trigger workflow_run_count_deleted_leases
    after delete on {schema}workflow_run
    for each row
    when (old.status = 'leased')
    execute function {schema}workflow_run_count_leases();

-- Rate limits (migration 0016): named limits, and the current window of each.
create table {schema}workflow_rate_limit (
    name        text primary key,
    max_runs    integer not null
                constraint workflow_rate_limit_max_runs_check check (max_runs >= 1),
    period      float8 not null
                constraint workflow_rate_limit_period_check check (period > 0),
    per_key     boolean not null default false,
    created_at  timestamptz not null default now(),
    updated_at  timestamptz not null default now()
);

-- The current window of each limit (and key): when it opened (a multiple of the period
-- since the epoch), how many claims it let through, and how many the last claim got.
-- The claim updates it with on conflict do update, which locks its newest version: two
-- claims never both take the last token.
create table {schema}workflow_rate_window (
    name         text not null,
    rate_key     text not null,
    window_start timestamptz not null,
    used         integer not null default 0,
    granted      integer not null default 0,
    primary key (name, rate_key)
);

-- Outcomes by time, for the dashboard's throughput chart (migration 0017).
create index idx_workflow_event_outcomes
    on {schema}workflow_event (created_at)
    where event_type in ('succeeded', 'failed', 'retried');

-- Worker presence (migration 0019): one row per worker process, upserted once per
-- heartbeat interval; live until seen_until, stopped_at set by a graceful stop.
create table {schema}workflow_worker (
    worker_id     text primary key,
    host          text not null,
    pid           integer not null,
    runtime       text not null default 'python',
    type_prefixes jsonb not null default '[]',
    concurrency   integer,
    version       text,
    started_at    timestamptz not null default now(),
    last_seen_at  timestamptz not null default now(),
    seen_until    timestamptz not null,
    stopped_at    timestamptz
);
create index idx_workflow_worker_seen_until on {schema}workflow_worker (seen_until);

-- A run's retention is fixed when it is created (migration 0022): the library's inserts
-- write it (the type's of now when none was asked for) and retention_fixed; a row
-- inserted without retention_fixed (plain SQL) gets both here.
create function {schema}workflow_run_fix_retention() returns trigger
language plpgsql as $$
begin
    if new.retention is null then
        new.retention := (select g.retention from {schema_name}.workflow_registry g
                          where g.workflow_name = new.type);
    end if;
    new.retention_fixed := true;
    return new;
end
$$;

create trigger workflow_run_fix_retention
    before insert on {schema}workflow_run
    for each row
    when (new.retention_fixed is null)
    execute function {schema}workflow_run_fix_retention();

-- Every change of a run's status leaves its event (migration 0023): the library's
-- statements write their own and add one to logged_changes; any other (plain SQL from
-- another runtime) gets one here. The WHEN clause costs the library's statements two
-- comparisons and no call.
create function {schema}workflow_run_log_change() returns trigger
language plpgsql as $$
begin
    insert into {schema_name}.workflow_event (workflow_id, event_type, data)
    values (
        new.id,
        case when new.status <> 'pending' then new.status
             when old.status <> 'leased' then 'retried_by_operator'
             when new.attempt > old.attempt then 'retried'
             else 'released' end,
        jsonb_strip_nulls(jsonb_build_object(
            'source', 'sql',
            'from', old.status,
            'worker_id', coalesce(new.leased_by, old.leased_by),
            'attempt', case when new.status in ('leased', 'succeeded') then new.attempt + 1
                            when new.status = 'failed' or new.attempt > old.attempt
                            then new.attempt end,
            'lease_until', case when new.status = 'leased' then new.lease_until end,
            'retry_at', case when new.status = 'pending' and old.status = 'leased'
                                  and new.attempt > old.attempt then new.run_at end,
            'error', case when new.status in ('failed', 'pending')
                               and new.last_error is distinct from old.last_error
                          then jsonb_build_object('message', new.last_error) end)));
    return null;
end
$$;

create trigger workflow_run_log_change
    after update of status on {schema}workflow_run
    for each row
    when (new.status is distinct from old.status and new.logged_changes = old.logged_changes)
    execute function {schema}workflow_run_log_change();

-- Dashboard logouts (migration 0024): a logged-out session's nonce, kept until the
-- session would have expired, so that every process refuses its cookie.
create table {schema}workflow_dashboard_logout (
    nonce          text primary key,
    expires_at     timestamptz not null,
    logged_out_at  timestamptz not null default now()
);
create index idx_workflow_dashboard_logout_expires_at
    on {schema}workflow_dashboard_logout (expires_at);

-- Values a run publishes (migration 0027, ctx.set_value): one row per run and key,
-- replaced by a later set of the same key; version counts the sets. The foreign key
-- deletes them with their run.
create table {schema}workflow_value (
    run_id     uuid not null references {schema}workflow_run (id) on delete cascade,
    key        text not null,
    value      jsonb not null,
    version    integer not null default 1,
    step_name  text not null,
    updated_at timestamptz not null default now(),
    primary key (run_id, key)
);

-- Streams (migration 0028): see the migration for the columns.
create table {schema}workflow_stream_item (
    run_id      uuid not null,
    stream_key  text not null,
    position    bigint not null,
    origin      text not null,
    origin_seq  integer not null,
    value       jsonb,
    closed      boolean not null default false,
    created_at  timestamptz not null default now(),
    primary key (run_id, stream_key, position)
);
create unique index idx_workflow_stream_item_origin
    on {schema}workflow_stream_item (run_id, stream_key, origin, origin_seq);

create function {schema}workflow_run_delete_streams() returns trigger
language plpgsql as $$
begin
    delete from {schema_name}.workflow_stream_item
    where run_id = any(array(select id from deleted_runs));
    return null;
end
$$;

create trigger workflow_run_delete_streams
    after delete on {schema}workflow_run
    referencing old table as deleted_runs
    for each statement execute function {schema}workflow_run_delete_streams();

-- Forks (migration 0029, admin.fork): the run a run was forked from and the journal
-- entry it was forked at; null on every other run. The partial index holds forked runs
-- alone: the original's list of its forks.
alter table {schema}workflow_run add column forked_from uuid;
alter table {schema}workflow_run add column forked_at_step text;
create index idx_workflow_run_forked_from
    on {schema}workflow_run (forked_from)
    where forked_from is not null;

-- The library's starts write their own created event and wake-up (migration 0030).
drop trigger workflow_run_notify_insert on {schema}workflow_run;

create or replace function {schema}workflow_run_notify_insert() returns trigger
language plpgsql as $$
begin
    insert into {schema_name}.workflow_event (workflow_id, event_type, data)
    values (new.id, 'created', jsonb_build_object('type', new.type, 'priority', new.priority,
                                                  'run_at', new.run_at));
    -- identical wake-ups of one transaction reach a listener once
    if new.status = 'pending' then
        perform pg_notify('simpleworkflow', 'wake ' || tg_table_schema || ' ' || new.type
                                            || case when new.run_at > now()
                                                    then ' ' || extract(epoch from new.run_at)
                                                    else '' end);
    end if;
    return null;
end
$$;

create trigger workflow_run_notify_insert
    after insert on {schema}workflow_run
    for each row
    when (new.logged_changes = 0)
    execute function {schema}workflow_run_notify_insert();
