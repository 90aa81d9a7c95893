-- Every statement the Postgres backend runs, by name. {schema} is the quoted schema.

-- name: schema_version_table
create table if not exists {schema}workflow_schema_version (
    version    integer primary key,
    name       text not null,
    applied_at timestamptz not null default now()
)

-- name: schema_exists
select to_regclass(%(table)s) is not null as present

-- name: applied_versions
select version from {schema}workflow_schema_version order by version

-- name: record_version
insert into {schema}workflow_schema_version (version, name) values (%(version)s, %(name)s)

-- name: migration_lock
select pg_advisory_xact_lock(hashtext(%(key)s))

-- name: create_run
-- The run's created event and its type's wake-up are written here, and logged_changes = 1
-- keeps the insert trigger, which does the same for any other insert, from firing (0030).
-- Only what the store decides is sent back, the times (updated_at is created_at); the
-- client knows the rest of the row. The client picks the id (time-ordered, see
-- names.new_run_id); plain SQL inserts get the column default.
-- A run without a retention of its own takes its type's of now, and is sent back with
-- it; retention_fixed says so (0022: a plain SQL insert gets both from a trigger).
with started as (
insert into {schema}workflow_run
    (id, type, payload, idempotency_key, priority, run_at, max_attempts, parent_id, deadline,
     trace_context, retention, concurrency_key, retention_fixed, logged_changes)
values (
    %(id)s::uuid, %(type)s, %(payload)s::jsonb, %(idempotency_key)s, %(priority)s,
    coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s)),
    coalesce(%(max_attempts)s, 3),
    %(parent_id)s::uuid,
    coalesce(%(deadline)s::timestamptz, now() + make_interval(secs => %(deadline_in)s)),
    %(trace_context)s::jsonb,
    coalesce(%(retention)s::float8 * interval '1 second',
             (select g.retention from {schema}workflow_registry g
              where g.workflow_name = %(type)s)),
    %(concurrency_key)s,
    true,
    1
)
on conflict (idempotency_key) do nothing
returning id, type, priority, run_at, created_at, deadline, retention
), created as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'created', jsonb_build_object('type', type, 'priority', priority, 'run_at', run_at)
    from started
)
select created_at, run_at, deadline, extract(epoch from retention)::float8 as retention,
       pg_notify('simpleworkflow', 'wake {schema_text} ' || type
                                   || case when run_at > now()
                                           then ' ' || extract(epoch from run_at)
                                           else '' end) as woken
from started

-- name: create_runs
-- Many runs in one statement; ids come from the client so rows can be matched to items.
-- As create_run, it writes the created events, and one wake-up per type saying when its
-- earliest new run is due if that is later (0030). The runs of a statement share
-- created_at, and mostly run_at, deadline and retention: one row comes back per such
-- group, with its ids joined by commas, far fewer rows for the client to read than runs.
-- run_at comes back null when it is created_at (a run due at once).
with started as (
insert into {schema}workflow_run
    (id, type, payload, idempotency_key, priority, run_at, max_attempts, parent_id, deadline,
     trace_context, retention, concurrency_key, retention_fixed, logged_changes)
select i.id, i.type, i.payload::jsonb, i.idempotency_key, i.priority,
       coalesce(i.run_at, now() + make_interval(secs => i.delay)),
       coalesce(i.max_attempts, 3), i.parent_id,
       coalesce(i.deadline, now() + make_interval(secs => i.deadline_in)),
       i.trace_context::jsonb,
       coalesce(i.retention * interval '1 second',
                (select g.retention from {schema}workflow_registry g
                 where g.workflow_name = i.type)),
       i.concurrency_key,
       true,
       1
from jsonb_to_recordset(%(items)s::jsonb)
    as i(id uuid, type text, payload text, idempotency_key text, priority integer,
         run_at timestamptz, delay float8, max_attempts integer, parent_id uuid,
         deadline timestamptz, deadline_in float8, trace_context text, retention float8,
         concurrency_key text)
on conflict (idempotency_key) do nothing
returning id, type, priority, run_at, created_at, deadline, retention
), created as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'created', jsonb_build_object('type', type, 'priority', priority, 'run_at', run_at)
    from started
    order by created_at, id
)
select string_agg(id::text, ',') as ids, created_at, nullif(run_at, created_at) as run_at,
       deadline, extract(epoch from retention)::float8 as retention
from started
-- one wake-up per type, sent once (an uncorrelated subquery runs once per statement)
where (select count(pg_notify('simpleworkflow',
                              'wake {schema_text} ' || t.type
                              || case when t.due > now() then ' ' || extract(epoch from t.due)
                                      else '' end))
       from (select type, min(run_at) as due from started group by type) as t) >= 0
group by created_at, run_at, deadline, retention

-- name: debounce_run
-- A debounced start (docs/flow-control.md): the first call of a key inserts the run, due
-- one window later; a call while that run is pending and unclaimed updates it instead,
-- in place: its payload and options become this call's, and it is due one window from
-- now, but never later than max_wait after the first call (created_at). The unique index
-- idx_workflow_run_debounce arbitrates between concurrent callers. Should a worker claim
-- the run meanwhile, the row stops matching the index and this call inserts a fresh run.
-- A call that was absorbed returns the run's id, not the one it brought, and its
-- `debounced` event says so.
with upserted as (
    insert into {schema}workflow_run as r
        (id, type, payload, priority, run_at, max_attempts, deadline, trace_context,
         retention, debounce_key, concurrency_key, retention_fixed)
    values (
        %(id)s::uuid, %(type)s, %(payload)s::jsonb, %(priority)s,
        now() + make_interval(secs => %(debounce_window)s),
        coalesce(%(max_attempts)s, 3),
        coalesce(%(deadline)s::timestamptz, now() + make_interval(secs => %(deadline_in)s)),
        %(trace_context)s::jsonb,
        coalesce(%(retention)s::float8 * interval '1 second',
                 (select g.retention from {schema}workflow_registry g
                  where g.workflow_name = %(type)s)),
        %(debounce_key)s,
        %(concurrency_key)s,
        true
    )
    -- the concurrency key stays the first call's: the run's counters were made for it
    on conflict (type, debounce_key)
        where status = 'pending' and deleted_at is null and debounce_key is not null
    do update set
        payload = excluded.payload,
        priority = excluded.priority,
        -- least() passes over a null: no max_wait, no cap
        run_at = least(excluded.run_at,
                       r.created_at + make_interval(secs => %(debounce_max_wait)s::float8)),
        max_attempts = excluded.max_attempts,
        deadline = excluded.deadline,
        trace_context = excluded.trace_context,
        retention = excluded.retention,
        updated_at = now()
    returning r.id, r.run_at, r.deadline, r.created_at, r.updated_at, r.retention
), debounced_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'debounced',
           jsonb_build_object('key', %(debounce_key)s::text, 'run_at', run_at,
                              'priority', %(priority)s::integer)
    from upserted
    where id <> %(id)s::uuid
)
select id::text as id, run_at, deadline, created_at, updated_at,
       extract(epoch from retention)::float8 as retention
from upserted

-- name: get_runs_by_keys
select * from {schema}workflow_run where idempotency_key = any(%(keys)s::text[])

-- name: get_run_by_key
select * from {schema}workflow_run where idempotency_key = %(idempotency_key)s

-- name: get_run
select * from {schema}workflow_run where id = %(id)s

-- name: list_runs
-- The states asked for are alternatives: a stored status, a pending run suspended in a
-- wait of one of these kinds (alone, or as one of the waits of kind "any"), or a pending
-- run due again after a failed attempt.
select * from {schema}workflow_run
where (%(type_like)s::text is null or type like %(type_like)s)
  and (not %(filtered)s
       or status = any(%(statuses)s::text[])
       or (status = 'pending'
           and (waiting_for ->> 'kind' = any(%(waits)s::text[])
                or exists (select 1 from jsonb_array_elements(
                               case when jsonb_typeof(waiting_for -> 'waits') = 'array'
                                    then waiting_for -> 'waits' end) as w(wait)
                           where w.wait ->> 'kind' = any(%(waits)s::text[]))))
       or (%(retrying)s and status = 'pending' and waiting_for is null and attempt > 0))
  and (%(created_after)s::timestamptz is null or created_at >= %(created_after)s)
  and (%(created_before)s::timestamptz is null or created_at < %(created_before)s)
  and (%(include_deleted)s or deleted_at is null)
  and (%(after_created_at)s::timestamptz is null
       or (created_at, id) < (%(after_created_at)s::timestamptz, %(after_id)s::uuid))
order by created_at desc, id desc
limit %(limit)s

-- name: list_runs_containing
-- list_runs with payload_contains given: the filter stands alone, not behind an `is null
-- or`, so that every plan, generic ones too, may serve it from idx_workflow_run_payload.
-- Otherwise the same statement (tests/stores/test_payload_filter.py holds them to it).
select * from {schema}workflow_run
where (%(type_like)s::text is null or type like %(type_like)s)
  and (not %(filtered)s
       or status = any(%(statuses)s::text[])
       or (status = 'pending'
           and (waiting_for ->> 'kind' = any(%(waits)s::text[])
                or exists (select 1 from jsonb_array_elements(
                               case when jsonb_typeof(waiting_for -> 'waits') = 'array'
                                    then waiting_for -> 'waits' end) as w(wait)
                           where w.wait ->> 'kind' = any(%(waits)s::text[]))))
       or (%(retrying)s and status = 'pending' and waiting_for is null and attempt > 0))
  and (%(created_after)s::timestamptz is null or created_at >= %(created_after)s)
  and (%(created_before)s::timestamptz is null or created_at < %(created_before)s)
  and payload @> %(payload_contains)s::jsonb
  and (%(include_deleted)s or deleted_at is null)
  and (%(after_created_at)s::timestamptz is null
       or (created_at, id) < (%(after_created_at)s::timestamptz, %(after_id)s::uuid))
order by created_at desc, id desc
limit %(limit)s

-- name: cancel_run
-- Cancels the run and, through parent_id, every unfinished descendant; returns the rows
-- that were cancelled, as the cancel left them (the run's own first when it was).
with recursive tree (id) as (
    select %(id)s::uuid
    union all
    select r.id from {schema}workflow_run r join tree t on r.parent_id = t.id
), cancelled as (
    update {schema}workflow_run
    -- waiting_for is kept: what a suspended run was waiting for, and the sign that an
    -- attempt was under way (Run.attempts_made counts it)
    set status = 'cancelled', updated_at = now(),
        logged_changes = logged_changes + 1
    where id in (select id from tree) and status in ('pending', 'leased')
    returning *, lease_token is not null as leased
), cancelled_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'cancelled',
           case when id = %(id)s::uuid then %(data)s::jsonb
                else jsonb_build_object('reason', 'parent cancelled', 'parent_id', parent_id) end
    from cancelled
), woken_parents as (
    update {schema}workflow_run p
    set run_at = now(), updated_at = now()
    from cancelled c
    where p.id = c.parent_id and p.status = 'pending'
      and exists (
          select 1
          from jsonb_array_elements(coalesce(p.waiting_for -> 'waits',
                                             jsonb_build_array(p.waiting_for))) as w
          where w ->> 'child_id' = c.id::text
      )
      and not exists (select 1 from cancelled x where x.id = p.id)
)
-- A run released by its worker has no lease token: one that has was leased.
select * from cancelled order by id = %(id)s::uuid desc

-- name: delete_run
with deleted as (
    update {schema}workflow_run
    set deleted_at = now(), updated_at = now()
    where id = %(id)s and deleted_at is null
    returning id
), deleted_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'deleted', '{}'::jsonb from deleted
)
select id from deleted

-- name: list_events
select * from {schema}workflow_event where workflow_id = %(id)s order by id

-- name: list_signals
select id, run_id, event, payload, created_at, consumed_at, step_name
from {schema}workflow_signal where run_id = %(id)s order by id

-- Worker statements. Every write for a leased run is fenced: it matches only while the
-- run still carries the lease token the worker was given when it claimed the run.

-- name: register_types
insert into {schema}workflow_registry (workflow_name, runtime)
select name, %(runtime)s from unnest(%(types)s::text[]) as t(name)
on conflict (workflow_name) do nothing

-- name: list_registry
select * from {schema}workflow_registry order by workflow_name

-- name: set_registry
insert into {schema}workflow_registry (workflow_name, runtime, description)
values (%(name)s, %(runtime)s, %(description)s)
on conflict (workflow_name) do update
set runtime = excluded.runtime,
    description = coalesce(excluded.description, {schema}workflow_registry.description),
    updated_at = now()
returning *

-- name: enable_registry
update {schema}workflow_registry
set is_enabled = %(enabled)s, updated_at = now()
where workflow_name = %(name)s
returning *

-- name: set_registry_retention
-- The retention of a type's runs started without one of their own; null: the default.
update {schema}workflow_registry
set retention = %(retention)s::float8 * interval '1 second', updated_at = now()
where workflow_name = %(name)s
returning *

-- name: lock_registry
-- The registry rows of types whose declared limits a starting worker writes, in name
-- order: workers of one app starting at once take turns (and the second finds nothing
-- left to change).
select workflow_name from {schema}workflow_registry
where workflow_name = any(%(types)s::text[])
order by workflow_name
for update

-- name: set_registry_concurrency
-- At most concurrency leased runs of the type, and key_concurrency per concurrency key;
-- null: no limit. recount_concurrency follows, in the same transaction.
update {schema}workflow_registry
set concurrency = %(concurrency)s, key_concurrency = %(key_concurrency)s, updated_at = now()
where workflow_name = %(name)s
returning *

-- name: lock_leases
-- Waits for the claims and outcomes under way and holds new ones off until commit, so
-- that the recount that follows sees every lease (a short pause of every worker).
lock table {schema}workflow_run in share mode

-- name: clear_concurrency
with returned as (
    delete from {schema}workflow_concurrency_returned where workflow_name = %(name)s
)
delete from {schema}workflow_concurrency where workflow_name = %(name)s

-- name: recount_concurrency
-- The counters of a type whose limits changed: one for the type and one for each key of
-- its pending and leased runs, holding its leased runs (taken, none returned yet).
with counters as (
insert into {schema}workflow_concurrency (workflow_name, concurrency_key, taken, capacity, is_full)
select r.type, k.concurrency_key, count(*) filter (where r.status = 'leased'), min(k.capacity),
       count(*) filter (where r.status = 'leased') >= min(k.capacity)
from {schema}workflow_run r
join {schema}workflow_registry g on g.workflow_name = r.type
cross join lateral (values ('', g.concurrency), (r.concurrency_key, g.key_concurrency))
    as k(concurrency_key, capacity)
where r.type = %(name)s and r.status in ('pending', 'leased')
  and k.concurrency_key is not null and k.capacity is not null
group by r.type, k.concurrency_key
union all
-- a type limited in all with no run yet
select g.workflow_name, '', 0, g.concurrency, false
from {schema}workflow_registry g
where g.workflow_name = %(name)s and g.concurrency is not null
  and not exists (select from {schema}workflow_run r
                  where r.type = g.workflow_name and r.status in ('pending', 'leased'))
returning workflow_name, concurrency_key
)
insert into {schema}workflow_concurrency_returned (workflow_name, concurrency_key)
select workflow_name, concurrency_key from counters

-- name: set_rate_limit
insert into {schema}workflow_rate_limit (name, max_runs, period, per_key)
values (%(name)s, %(max_runs)s, %(period)s, %(per_key)s)
on conflict (name) do update
set max_runs = excluded.max_runs, period = excluded.period, per_key = excluded.per_key,
    updated_at = now()
returning *

-- name: get_rate_limit
select * from {schema}workflow_rate_limit where name = %(name)s

-- name: list_rate_limits
select * from {schema}workflow_rate_limit order by name

-- name: delete_rate_limit
-- Types that named it obey no rate limit until it is set again.
with gone as (
    delete from {schema}workflow_rate_limit where name = %(name)s returning name
), windows as (
    delete from {schema}workflow_rate_window where name in (select name from gone)
)
select name from gone

-- name: set_registry_rate_limit
update {schema}workflow_registry
set rate_limit = %(rate_limit)s, updated_at = now()
where workflow_name = %(name)s
returning *

-- name: claim
-- A suspect (a run in a second crash beside others, see 0008, 0021) goes only to a worker
-- that holds no run (alone), and alone; while one is due, no worker claims ordinary runs,
-- so that busy workers drain until one is empty and takes it.
--
-- Concurrency limits (0015, 0018, 0020, docs/flow-control.md): the scan steps over types
-- and keys whose counter is full (a hashed look-up, so a blocked key starves no one);
-- then the candidates' taken rows are locked and read as they are now, their returned
-- rows read as this statement's snapshot saw them (never locked: the statements that end
-- leases update them, and a claim that waited on them would take turns with the
-- completions), and only as many runs of each key and type are claimed as they have room
-- for, and counted. A stale returned only makes the room look smaller: race-free.
--
-- Rate limits (0016): of the runs left, those of a type that obeys a rate limit take a
-- token each from the limit's current window (locked the same way); those it has no
-- token for stay pending, due again when the next window opens, with a throttled event.
with full_slots as materialized (
    -- full when their last claim counted them (a small partial index), and still full
    select f.workflow_name, f.concurrency_key
    from {schema}workflow_concurrency f
    left join {schema}workflow_concurrency_returned d
      on d.workflow_name = f.workflow_name and d.concurrency_key = f.concurrency_key
    where f.is_full
      and f.taken - coalesce(d.returned, 0) >= f.capacity
), suspect as (
    select r.id, r.waiting_for, r.type, r.concurrency_key, r.priority, r.run_at
    from {schema}workflow_run r
    where r.status = 'pending'
      and r.isolate
      and r.run_at <= now()
      and r.deleted_at is null
      -- the same filters as ordinary runs' below
      and r.type = any(%(types)s::text[])
      and (r.code_version is null or r.type || '@' || r.code_version = any(%(known)s::text[]))
      and r.type not in (
          select g.workflow_name from {schema}workflow_registry g
          where g.runtime <> %(runtime)s or not g.is_enabled
      )
      and r.type not in (select workflow_name from full_slots where concurrency_key = '')
      and (r.concurrency_key is null
           or (r.type, r.concurrency_key) not in (select * from full_slots))
    order by r.priority, r.run_at
    limit 1
    for update skip locked
), ordinary as (
    select r.id, r.waiting_for, r.type, r.concurrency_key, r.priority, r.run_at
    from {schema}workflow_run r
    where r.status = 'pending'
      and r.run_at <= now()
      and r.deleted_at is null
      and not r.isolate
      and not exists (select from suspect)
      and r.type = any(%(types)s::text[])
      and (r.code_version is null or r.type || '@' || r.code_version = any(%(known)s::text[]))
      -- Types another runtime owns, or paused: a hashed subplan read once per claim.
      -- As an anti-join (or "<> all(array(...))") the planner takes a registry row for
      -- the claimed type to filter out nearly every pending run, and then scans and sorts
      -- them all instead of walking the claim index. workflow_name is never null.
      and r.type not in (
          select g.workflow_name from {schema}workflow_registry g
          where g.runtime <> %(runtime)s or not g.is_enabled
      )
      -- Full types and keys, hashed the same way.
      and r.type not in (select workflow_name from full_slots where concurrency_key = '')
      and (r.concurrency_key is null
           or (r.type, r.concurrency_key) not in (select * from full_slots))
    order by r.priority, r.run_at
    limit %(limit)s
    for update skip locked
), candidates as (
    select * from suspect where %(alone)s
    union all
    select * from ordinary
), limits as (
    select g.workflow_name, g.concurrency, g.key_concurrency
    from {schema}workflow_registry g
    where g.workflow_name in (select type from candidates)
      and (g.concurrency is not null or g.key_concurrency is not null)
), slots as (
    -- The counters of the candidates' limited types and keys, their taken rows locked in
    -- key order (claims never wait on each other in a cycle) and read at their newest
    -- version, not as this statement's snapshot saw them; returned as the snapshot saw
    -- it, too low if anything. A counter missing here leaves no room.
    select s.workflow_name, s.concurrency_key, s.taken,
           (select d.returned from {schema}workflow_concurrency_returned d
            where d.workflow_name = s.workflow_name
              and d.concurrency_key = s.concurrency_key) as returned
    from {schema}workflow_concurrency s
    where (s.workflow_name, s.concurrency_key) in (
        select l.workflow_name, '' from limits l where l.concurrency is not null
        union all
        select c.type, c.concurrency_key
        from candidates c join limits l on l.workflow_name = c.type
        where l.key_concurrency is not null and c.concurrency_key is not null
    )
    order by s.workflow_name, s.concurrency_key
    for update of s
), by_key as (
    -- Each candidate with its counters: the counters' rows and the candidates in one
    -- stream, windowed by type and key (one sort), instead of a join of the two (CTEs the
    -- planner takes for a row each: it compared every candidate with every counter, a
    -- hundred keys' cost squared). Within a key the claim takes runs in the usual order.
    select u.id, u.waiting_for, u.type, u.concurrency_key, u.priority, u.run_at,
           l.concurrency, l.key_concurrency,
           max(u.held) filter (where u.concurrency_key = '') over t as type_held,
           max(u.returned) filter (where u.concurrency_key = '') over t as type_returned,
           max(u.held) over (k rows between unbounded preceding and unbounded following)
               as key_held,
           max(u.returned) over (k rows between unbounded preceding and unbounded following)
               as key_returned,
           count(u.id) over (k rows unbounded preceding) as n
    from (
        select c.id, c.waiting_for, c.type, c.concurrency_key, c.priority, c.run_at,
               null::integer as held, null::integer as returned
        from candidates c
        union all
        select null, null, s.workflow_name, s.concurrency_key, null, null,
               greatest(s.taken - coalesce(s.returned, 0), 0), s.returned
        from slots s
    ) as u
    left join limits l on l.workflow_name = u.type
    window t as (partition by u.type),
           k as (partition by u.type, u.concurrency_key order by u.priority, u.run_at, u.id)
), by_type as (
    select b.id, b.waiting_for, b.type, b.concurrency_key, b.priority, b.run_at, b.concurrency,
           b.type_held, b.type_returned, b.key_returned,
           b.concurrency is not null or b.key_concurrency is not null as counted,
           row_number() over (partition by b.type order by b.priority, b.run_at, b.id) as n
    from by_key b
    where b.id is not null
      -- a key's room: a counter missing here leaves none
      and (b.key_concurrency is null or b.concurrency_key is null
           or b.n <= b.key_concurrency - coalesce(b.key_held, b.key_concurrency))
), allowed as (
    select b.id, b.waiting_for, b.type, b.concurrency_key, b.priority, b.run_at,
           b.type_returned, b.key_returned, b.counted
    from by_type b
    where b.concurrency is null or b.n <= b.concurrency - coalesce(b.type_held, b.concurrency)
), rated as (
    select a.id, l.name, l.max_runs, l.period,
           case when l.per_key then coalesce(a.concurrency_key, '') else '' end as rate_key,
           row_number() over (
               partition by l.name, case when l.per_key then coalesce(a.concurrency_key, '') end
               order by a.priority, a.run_at, a.id) as n
    from allowed a
    join {schema}workflow_registry g on g.workflow_name = a.type
    join {schema}workflow_rate_limit l on l.name = g.rate_limit
), windows as (
    -- Each window is counted where it stands now: a window that opened since this
    -- statement's snapshot (or before it) is the one on the row, locked.
    insert into {schema}workflow_rate_window as w (name, rate_key, window_start, used, granted)
    select r.name, r.rate_key, r.opens, r.tokens, r.tokens
    from (
        select name, rate_key, least(count(*), min(max_runs))::integer as tokens,
               to_timestamp(floor(extract(epoch from now()) / min(period)) * min(period)) as opens
        from rated
        group by name, rate_key
    ) as r
    order by r.name, r.rate_key
    on conflict (name, rate_key) do update
    set granted = case when w.window_start >= excluded.window_start
                       then greatest(least(excluded.granted, (
                                select l.max_runs from {schema}workflow_rate_limit l
                                where l.name = w.name) - w.used), 0)
                       else excluded.granted end,
        used = case when w.window_start >= excluded.window_start
                    then w.used + greatest(least(excluded.granted, (
                             select l.max_runs from {schema}workflow_rate_limit l
                             where l.name = w.name) - w.used), 0)
                    else excluded.granted end,
        window_start = greatest(w.window_start, excluded.window_start)
    returning w.name, w.rate_key, w.granted,
              w.window_start + (select l.period from {schema}workflow_rate_limit l
                                where l.name = w.name) * interval '1 second' as next_window
), throttled as (
    select r.id, w.next_window, r.name
    from rated r join windows w on w.name = r.name and w.rate_key = r.rate_key
    where r.n > w.granted
), deferred as (
    -- shown as throttled until claimed: waiting_for says so, and keeps the wait the run
    -- resumes from (if any) under 'resumes' for the claim's resumed event
    update {schema}workflow_run r
    set run_at = t.next_window,
        waiting_for = jsonb_build_object('kind', 'throttle', 'rate_limit', t.name,
                                         'until', t.next_window)
                      || case when r.waiting_for is null then '{}'::jsonb
                              when r.waiting_for ->> 'kind' = 'throttle'
                                   and not r.waiting_for ? 'step'
                              then jsonb_strip_nulls(jsonb_build_object(
                                       'resumes', r.waiting_for -> 'resumes'))
                              else jsonb_build_object('resumes', r.waiting_for) end,
        updated_at = now()
    from throttled t
    where r.id = any(array(select id from throttled)) and r.id = t.id
    returning r.id, r.run_at, t.name
), deferred_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'throttled', jsonb_build_object('rate_limit', name, 'until', run_at)
    from deferred
), claimed as (
    update {schema}workflow_run r
    set status = 'leased',
        logged_changes = logged_changes + 1,
        leased_by = %(worker_id)s,
        lease_until = now() + make_interval(secs => %(lease)s),
        lease_token = gen_random_uuid(),
        lease_returned = false,
        waiting_for = null,
        code_version = coalesce(r.code_version, %(versions)s::jsonb ->> r.type),
        updated_at = now()
    from allowed c
    -- The array makes this a primary-key lookup of the claimed ids; a bare join lets the
    -- planner hash the candidates and scan the whole table.
    where r.id = any(array(select id from allowed except select id from throttled))
      and r.id = c.id
    returning r.*,
              -- a run throttled at an earlier claim resumes what its wait keeps, if any
              case when c.waiting_for ->> 'kind' = 'throttle' and not c.waiting_for ? 'step'
                   then c.waiting_for -> 'resumes' else c.waiting_for end as was_waiting_for,
              now() as db_now, c.type_returned, c.key_returned, c.counted
), counted as (
    -- the leases taken, added once to each counter's taken row (locked above), and
    -- whether that leaves it full by the returned this claim read (for the full-counter
    -- index); the lease ends are counted in the returned rows
    update {schema}workflow_concurrency s
    set taken = s.taken + d.leases,
        is_full = s.taken + d.leases - coalesce(d.returned, 0) >= s.capacity
    from (select c.type, k.concurrency_key, count(*) as leases, max(k.returned) as returned
          from claimed c
          cross join lateral (values ('', c.type_returned), (c.concurrency_key, c.key_returned))
              as k(concurrency_key, returned)
          where k.concurrency_key is not null
          group by c.type, k.concurrency_key) as d
    where s.workflow_name = d.type and s.concurrency_key = d.concurrency_key
), claim_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select c.id, e.event_type,
           case when e.event_type = 'resumed' then c.was_waiting_for
                else jsonb_build_object('worker_id', c.leased_by, 'attempt', c.attempt + 1,
                                        'lease_until', c.lease_until) end
    from claimed c
    cross join (values (1, 'leased'), (2, 'started'), (3, 'resumed')) as e(n, event_type)
    where e.event_type <> 'resumed' or c.was_waiting_for is not null
    order by c.id, e.n
)
-- The runs claimed, each saying whether its lease was counted (its outcome must give it
-- back). Each row also says in how many seconds the earliest run this claim throttled is
-- due (throttled_for, for the worker's timer; null: none) and whether any of the types
-- has a limit now (limited: if none, the worker's next claim is claim_plain); if it
-- claimed none, one row says only that (every other column null).
select c.*, d.throttled_for, d.limited
from claimed c
full join (select extract(epoch from min(run_at) - now())::float8 as throttled_for,
                  exists (select from {schema}workflow_registry g
                          where g.workflow_name = any(%(types)s::text[])
                            and (g.concurrency is not null or g.key_concurrency is not null
                                 or g.rate_limit is not null)) as limited
           from deferred) as d on true

-- name: claim_plain
-- The claim for a worker whose last claim found none of its types limited (limited):
-- claim without its concurrency and rate limit steps, which cost a run of a type without
-- limits a fifth of its drain (docs/performance.md). A type that has a limit at this
-- statement's snapshot is left out with the paused ones, and the row that says limited
-- sends the worker back to claim; a limit set after the snapshot waits for this claim to
-- commit (lock_leases) and counts its leases; a rate limit is read at the snapshot, as
-- claim reads it. No lease here is counted: a recount since (a limit set while the run
-- is leased) is given back by the trigger, which the outcome statements leave to it then.
with suspect as (
    select r.id, r.waiting_for
    from {schema}workflow_run r
    where r.status = 'pending'
      and r.isolate
      and r.run_at <= now()
      and r.deleted_at is null
      and r.type = any(%(types)s::text[])
      and (r.code_version is null or r.type || '@' || r.code_version = any(%(known)s::text[]))
      and r.type not in (
          select g.workflow_name from {schema}workflow_registry g
          where g.runtime <> %(runtime)s or not g.is_enabled or g.concurrency is not null
             or g.key_concurrency is not null or g.rate_limit is not null
      )
    order by r.priority, r.run_at
    limit 1
    for update skip locked
), ordinary as (
    select r.id, r.waiting_for
    from {schema}workflow_run r
    where r.status = 'pending'
      and r.run_at <= now()
      and r.deleted_at is null
      and not r.isolate
      and not exists (select from suspect)
      and r.type = any(%(types)s::text[])
      and (r.code_version is null or r.type || '@' || r.code_version = any(%(known)s::text[]))
      -- a hashed subplan read once per claim, as in claim
      and r.type not in (
          select g.workflow_name from {schema}workflow_registry g
          where g.runtime <> %(runtime)s or not g.is_enabled or g.concurrency is not null
             or g.key_concurrency is not null or g.rate_limit is not null
      )
    order by r.priority, r.run_at
    limit %(limit)s
    for update skip locked
), candidates as (
    select * from suspect where %(alone)s
    union all
    select * from ordinary
), claimed as (
    update {schema}workflow_run r
    set status = 'leased',
        logged_changes = logged_changes + 1,
        leased_by = %(worker_id)s,
        lease_until = now() + make_interval(secs => %(lease)s),
        lease_token = gen_random_uuid(),
        lease_returned = false,
        waiting_for = null,
        code_version = coalesce(r.code_version, %(versions)s::jsonb ->> r.type),
        updated_at = now()
    from candidates c
    where r.id = any(array(select id from candidates)) and r.id = c.id
    returning r.*,
              case when c.waiting_for ->> 'kind' = 'throttle' and not c.waiting_for ? 'step'
                   then c.waiting_for -> 'resumes' else c.waiting_for end as was_waiting_for,
              now() as db_now, false as counted
), claim_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select c.id, e.event_type,
           case when e.event_type = 'resumed' then c.was_waiting_for
                else jsonb_build_object('worker_id', c.leased_by, 'attempt', c.attempt + 1,
                                        'lease_until', c.lease_until) end
    from claimed c
    cross join (values (1, 'leased'), (2, 'started'), (3, 'resumed')) as e(n, event_type)
    where e.event_type <> 'resumed' or c.was_waiting_for is not null
    order by c.id, e.n
)
select c.*, l.limited
from claimed c
full join (select exists (select from {schema}workflow_registry g
                          where g.workflow_name = any(%(types)s::text[])
                            and (g.concurrency is not null or g.key_concurrency is not null
                                 or g.rate_limit is not null)) as limited) as l on true

-- name: claim_settings
-- Sent with a claim in one implicit transaction (a pipeline): the claim is planned once
-- per connection, not per call. Its custom plan is the same index walk as its generic
-- one, and planning it took longer than running it (docs/performance.md). Unless the
-- worker keeps synchronous claims, the claim's commit does not wait for the disk either
-- (docs/performance.md, "Claims and heartbeats without waiting for the disk").
select set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('synchronous_commit',
                  coalesce(%(synchronous_commit)s::text, current_setting('synchronous_commit')),
                  true)

-- name: claim_settings_session
-- claim_settings for a connection's whole session: the worker's listening connection,
-- which runs nothing but claims, sets them once and then sends each claim alone, without
-- the pipeline's second round trip (backends/postgres/listening.py). Waiting for the
-- disk takes the value the session began with, not the one an earlier claim left.
select set_config('plan_cache_mode', 'force_generic_plan', false),
       set_config('synchronous_commit',
                  coalesce(%(synchronous_commit)s::text,
                           (select reset_val from pg_settings where name = 'synchronous_commit')),
                  false)

-- name: unknown_versions
-- Due runs this worker may not replay: their code version is not one it knows.
select type, code_version, count(*) as runs
from {schema}workflow_run
where status = 'pending' and run_at <= now() and deleted_at is null
  and type = any(%(types)s::text[])
  and code_version is not null
  and not (type || '@' || code_version = any(%(known)s::text[]))
group by type, code_version

-- name: heartbeat
with leases as (
    select * from jsonb_to_recordset(%(items)s::jsonb) as l(id uuid, token uuid)
), extended as (
    update {schema}workflow_run r
    set lease_until = now() + make_interval(secs => %(lease)s), updated_at = now()
    from leases l
    where r.id = l.id and r.lease_token = l.token and r.status = 'leased'
      -- a heartbeat that reaches the store after the lease ran out, or within the
      -- worker's give-up margin of its end, extends it no more: its worker has given the
      -- run up by then (worker/leases.py), and the run must not wait for the extension
      and r.lease_until > now() + make_interval(secs => %(margin)s)
    returning r.id
), heartbeat_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'heartbeat',
           jsonb_build_object('extended_by_seconds', %(lease)s::float8,
                              'worker_id', %(worker_id)s::text)
    from extended
    where %(with_events)s
)
select id from extended

-- name: lease_states
select l.id, r.status, r.lease_token = l.token and r.lease_until > now() as held
from jsonb_to_recordset(%(items)s::jsonb) as l(id uuid, token uuid)
left join {schema}workflow_run r on r.id = l.id

-- name: succeed_runs
with outcomes as (
    select * from jsonb_to_recordset(%(items)s::jsonb) as o(id uuid, token uuid, result text)
), counters as (
    -- The returned rows of these runs' concurrency counters (0015, 0018, 0020), locked
    -- in key order before returned below adds to them: no two outcomes wait on each
    -- other in a cycle (claims never lock these rows). Each by its primary key (a join
    -- on the type alone reads every key's row per run); none for types without a limit.
    select 1
    from {schema}workflow_concurrency_returned s
    where (s.workflow_name, s.concurrency_key) in (
        select x.type, k.concurrency_key
        from {schema}workflow_run x
        cross join lateral (values (''), (x.concurrency_key)) as k(concurrency_key)
        -- the array makes this primary-key lookups; a semi-join may scan the whole table
        where x.id = any(array(select id from outcomes))
    )
      -- a type's own row ('') is locked by every outcome of the type, so its keys' rows,
      -- written only under it, need no lock of their own (a WAL record less per key);
      -- a type limited per key alone locks its keys' rows
      and (s.concurrency_key = ''
           or not exists (select from {schema}workflow_concurrency_returned t
                          where t.workflow_name = s.workflow_name and t.concurrency_key = ''))
    order by s.workflow_name, s.concurrency_key
    for update of s
), done as (
    update {schema}workflow_run r
    set status = 'succeeded', result = o.result::jsonb, lease_until = null,
        logged_changes = logged_changes + 1,
        lease_token = null, lease_returned = true, updated_at = now()
    from outcomes o
    where r.id = o.id and r.lease_token = o.token and r.status = 'leased'
      and (select count(*) from counters) >= 0
    returning r.id, r.leased_by, r.attempt, r.parent_id, r.type, r.concurrency_key
), returned as (
    -- The leases ended here, added to each counter's returned row once (0020); the runs
    -- say lease_returned, so the trigger that counts other writers' lease ends skips them.
    update {schema}workflow_concurrency_returned s
    set returned = s.returned + e.leases
    from (select d.type, k.concurrency_key, count(*) as leases
          from done d
          cross join lateral (values (''), (d.concurrency_key)) as k(concurrency_key)
          where k.concurrency_key is not null
          group by d.type, k.concurrency_key) as e
    where s.workflow_name = e.type and s.concurrency_key = e.concurrency_key
), done_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'succeeded', jsonb_build_object('worker_id', leased_by, 'attempt', attempt + 1)
    from done
), woken_parents as (
    update {schema}workflow_run p
    set run_at = now(), updated_at = now()
    from done d
    where p.id = d.parent_id and p.status = 'pending'
      and exists (
          select 1
          from jsonb_array_elements(coalesce(p.waiting_for -> 'waits',
                                             jsonb_build_array(p.waiting_for))) as w
          where w ->> 'child_id' = d.id::text
      )
)
select id from done

-- name: succeed_runs_plain
-- succeed_runs, for runs whose claim counted no lease (claim_plain's, and claim's of
-- types without a concurrency limit): no counters to lock or add to.
with outcomes as (
    select * from jsonb_to_recordset(%(items)s::jsonb) as o(id uuid, token uuid, result text)
), done as (
    update {schema}workflow_run r
    set status = 'succeeded', result = o.result::jsonb, lease_until = null,
        logged_changes = logged_changes + 1,
        lease_token = null, updated_at = now(),
        -- a type limited since the claim (set_registry_concurrency counted this
        -- lease): the trigger gives it back
        lease_returned = not exists (select from {schema}workflow_concurrency_returned t
                                     where t.workflow_name = r.type)
    from outcomes o
    where r.id = o.id and r.lease_token = o.token and r.status = 'leased'
    returning r.id, r.leased_by, r.attempt, r.parent_id, r.type, r.concurrency_key
), done_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'succeeded', jsonb_build_object('worker_id', leased_by, 'attempt', attempt + 1)
    from done
), woken_parents as (
    update {schema}workflow_run p
    set run_at = now(), updated_at = now()
    from done d
    where p.id = d.parent_id and p.status = 'pending'
      and exists (
          select 1
          from jsonb_array_elements(coalesce(p.waiting_for -> 'waits',
                                             jsonb_build_array(p.waiting_for))) as w
          where w ->> 'child_id' = d.id::text
      )
)
select id from done

-- name: continue_runs
-- Continue-as-new (0026): runs that succeed_runs has just ended, in this transaction, with
-- result {"continued_as": next}, each carried on by a new run of its type. The new run
-- starts with the given payload and an empty journal, and keeps the old run's priority,
-- max_attempts, parent, concurrency key and retention; not its idempotency key (the old run
-- keeps it), deadline or code version. Its trace context is the old run's start, with the
-- continuing attempt under 'attempt' for its first attempt to link to. The insert
-- trigger writes its created event and wakes the workers of its type.
with items as (
    select * from jsonb_to_recordset(%(items)s::jsonb)
        as i(id uuid, next uuid, payload text, trace jsonb)
), linked as (
    update {schema}workflow_run r
    set continued_as = i.next
    from items i
    where r.id = i.id and r.status = 'succeeded' and r.continued_as is null
    returning r.id, r.type, r.priority, r.max_attempts, r.parent_id, r.concurrency_key,
              r.retention, r.retention_fixed, r.trace_context, i.next, i.payload, i.trace
), started as (
    insert into {schema}workflow_run
        (id, type, payload, priority, max_attempts, parent_id, trace_context, retention,
         concurrency_key, retention_fixed, continued_from)
    select l.next, l.type, l.payload::jsonb, l.priority, l.max_attempts, l.parent_id,
           case when jsonb_typeof(l.trace_context) is distinct from 'object'
                then case when l.trace is null then null
                          else jsonb_build_object('attempt', l.trace) end
                when l.trace is null then l.trace_context - 'attempt'
                else l.trace_context || jsonb_build_object('attempt', l.trace) end,
           l.retention, l.concurrency_key, l.retention_fixed, l.id
    from linked l
    returning id
)
insert into {schema}workflow_event (workflow_id, event_type, data)
select l.id, 'continued_as_new', jsonb_build_object('continued_as', l.next)
from linked l
where l.next in (select id from started)

-- name: fail_runs
with outcomes as (
    select * from jsonb_to_recordset(%(items)s::jsonb)
        as o(id uuid, token uuid, final boolean, delay float8, error text, data jsonb,
             charged boolean, suspect boolean, crashes integer, keep_place boolean,
                trace jsonb)
), counters as (
    -- The returned rows of these runs' concurrency counters (0015, 0018, 0020), locked
    -- in key order before returned below adds to them: no two outcomes wait on each
    -- other in a cycle (claims never lock these rows). Each by its primary key (a join
    -- on the type alone reads every key's row per run); none for types without a limit.
    select 1
    from {schema}workflow_concurrency_returned s
    where (s.workflow_name, s.concurrency_key) in (
        select x.type, k.concurrency_key
        from {schema}workflow_run x
        cross join lateral (values (''), (x.concurrency_key)) as k(concurrency_key)
        -- the array makes this primary-key lookups; a semi-join may scan the whole table
        where x.id = any(array(select id from outcomes))
    )
      -- a type's own row ('') is locked by every outcome of the type, so its keys' rows,
      -- written only under it, need no lock of their own (a WAL record less per key);
      -- a type limited per key alone locks its keys' rows
      and (s.concurrency_key = ''
           or not exists (select from {schema}workflow_concurrency_returned t
                          where t.workflow_name = s.workflow_name and t.concurrency_key = ''))
    order by s.workflow_name, s.concurrency_key
    for update of s
), done as (
    update {schema}workflow_run r
    set status = case when o.final then 'failed' else 'pending' end,
        logged_changes = logged_changes + 1,
        attempt = r.attempt + case when o.charged then 1 else 0 end,
        isolate = o.suspect,
        crashes = coalesce(o.crashes, 0),
        -- a crash: due at once, in its place in the queue (a claim keeps run_at), just
        -- ahead of the runs due with it (a batch of runs shares one run_at)
        run_at = case when o.final then r.run_at
                      when o.keep_place then r.run_at - interval '1 millisecond'
                      else now() + make_interval(secs => o.delay) end,
        last_error = o.error,
        leased_by = case when o.final then r.leased_by end,
        lease_until = null,
        lease_token = null,
        lease_returned = true,
        -- the attempt given back, for the next one to link to (none: forget the last);
        -- a context that is no object (written by hand) is kept, or replaced
        trace_context = case when jsonb_typeof(r.trace_context) is distinct from 'object'
                             then case when o.trace is null then r.trace_context
                                       else jsonb_build_object('attempt', o.trace) end
                             when o.trace is null then r.trace_context - 'attempt'
                             else r.trace_context || jsonb_build_object('attempt', o.trace) end,
        updated_at = now()
    from outcomes o
    where r.id = o.id and r.lease_token is not distinct from o.token and r.status = 'leased'
      and (select count(*) from counters) >= 0
    returning r.id, r.status, r.attempt, r.run_at, r.parent_id, r.type, r.concurrency_key
), returned as (
    -- The leases ended here, added to each counter's returned row once (0020); the runs
    -- say lease_returned, so the trigger that counts other writers' lease ends skips them.
    update {schema}workflow_concurrency_returned s
    set returned = s.returned + e.leases
    from (select d.type, k.concurrency_key, count(*) as leases
          from done d
          cross join lateral (values (''), (d.concurrency_key)) as k(concurrency_key)
          where k.concurrency_key is not null
          group by d.type, k.concurrency_key) as e
    where s.workflow_name = e.type and s.concurrency_key = e.concurrency_key
), woken_parents as (
    update {schema}workflow_run p
    set run_at = now(), updated_at = now()
    from done d
    where d.status = 'failed' and p.id = d.parent_id and p.status = 'pending'
      and exists (
          select 1
          from jsonb_array_elements(coalesce(p.waiting_for -> 'waits',
                                             jsonb_build_array(p.waiting_for))) as w
          where w ->> 'child_id' = d.id::text
      )
), fail_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select d.id, case when d.status = 'failed' then 'failed' else 'retried' end,
           o.data || jsonb_build_object('attempt', d.attempt,
                                        'retry_at', case when d.status = 'pending' then d.run_at end)
    from done d join outcomes o on o.id = d.id
)
select id from done

-- name: fail_runs_plain
-- fail_runs, for runs whose claim counted no lease (claim_plain's, and claim's of
-- types without a concurrency limit): no counters to lock or add to.
with outcomes as (
    select * from jsonb_to_recordset(%(items)s::jsonb)
        as o(id uuid, token uuid, final boolean, delay float8, error text, data jsonb,
             charged boolean, suspect boolean, crashes integer, keep_place boolean,
                trace jsonb)
), done as (
    update {schema}workflow_run r
    set status = case when o.final then 'failed' else 'pending' end,
        logged_changes = logged_changes + 1,
        attempt = r.attempt + case when o.charged then 1 else 0 end,
        isolate = o.suspect,
        crashes = coalesce(o.crashes, 0),
        -- a crash: due at once, in its place in the queue (a claim keeps run_at), just
        -- ahead of the runs due with it (a batch of runs shares one run_at)
        run_at = case when o.final then r.run_at
                      when o.keep_place then r.run_at - interval '1 millisecond'
                      else now() + make_interval(secs => o.delay) end,
        last_error = o.error,
        leased_by = case when o.final then r.leased_by end,
        lease_until = null,
        lease_token = null,
        -- a type limited since the claim (set_registry_concurrency counted this
        -- lease): the trigger gives it back
        lease_returned = not exists (select from {schema}workflow_concurrency_returned t
                                     where t.workflow_name = r.type),
        -- the attempt given back, for the next one to link to (none: forget the last);
        -- a context that is no object (written by hand) is kept, or replaced
        trace_context = case when jsonb_typeof(r.trace_context) is distinct from 'object'
                             then case when o.trace is null then r.trace_context
                                       else jsonb_build_object('attempt', o.trace) end
                             when o.trace is null then r.trace_context - 'attempt'
                             else r.trace_context || jsonb_build_object('attempt', o.trace) end,
        updated_at = now()
    from outcomes o
    where r.id = o.id and r.lease_token is not distinct from o.token and r.status = 'leased'
    returning r.id, r.status, r.attempt, r.run_at, r.parent_id, r.type, r.concurrency_key
), woken_parents as (
    update {schema}workflow_run p
    set run_at = now(), updated_at = now()
    from done d
    where d.status = 'failed' and p.id = d.parent_id and p.status = 'pending'
      and exists (
          select 1
          from jsonb_array_elements(coalesce(p.waiting_for -> 'waits',
                                             jsonb_build_array(p.waiting_for))) as w
          where w ->> 'child_id' = d.id::text
      )
), fail_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select d.id, case when d.status = 'failed' then 'failed' else 'retried' end,
           o.data || jsonb_build_object('attempt', d.attempt,
                                        'retry_at', case when d.status = 'pending' then d.run_at end)
    from done d join outcomes o on o.id = d.id
)
select id from done

-- name: release_runs
-- A release keeps the run's suspect mark: giving a run back says nothing about it.
with outcomes as (
    select * from jsonb_to_recordset(%(items)s::jsonb)
        as o(id uuid, token uuid, delay float8, trace jsonb)
), counters as (
    -- The returned rows of these runs' concurrency counters (0015, 0018, 0020), locked
    -- in key order before returned below adds to them: no two outcomes wait on each
    -- other in a cycle (claims never lock these rows). Each by its primary key (a join
    -- on the type alone reads every key's row per run); none for types without a limit.
    select 1
    from {schema}workflow_concurrency_returned s
    where (s.workflow_name, s.concurrency_key) in (
        select x.type, k.concurrency_key
        from {schema}workflow_run x
        cross join lateral (values (''), (x.concurrency_key)) as k(concurrency_key)
        -- the array makes this primary-key lookups; a semi-join may scan the whole table
        where x.id = any(array(select id from outcomes))
    )
      -- a type's own row ('') is locked by every outcome of the type, so its keys' rows,
      -- written only under it, need no lock of their own (a WAL record less per key);
      -- a type limited per key alone locks its keys' rows
      and (s.concurrency_key = ''
           or not exists (select from {schema}workflow_concurrency_returned t
                          where t.workflow_name = s.workflow_name and t.concurrency_key = ''))
    order by s.workflow_name, s.concurrency_key
    for update of s
), done as (
    update {schema}workflow_run r
    set status = 'pending', leased_by = null, lease_until = null, lease_token = null,
        logged_changes = logged_changes + 1,
        lease_returned = true,
        -- given back now, a run keeps its place in the queue; later, it waits its turn
        run_at = case when o.delay > 0 then now() + make_interval(secs => o.delay)
                      else r.run_at end,
        -- the attempt given back, for the next one to link to (none: forget the last);
        -- a context that is no object (written by hand) is kept, or replaced
        trace_context = case when jsonb_typeof(r.trace_context) is distinct from 'object'
                             then case when o.trace is null then r.trace_context
                                       else jsonb_build_object('attempt', o.trace) end
                             when o.trace is null then r.trace_context - 'attempt'
                             else r.trace_context || jsonb_build_object('attempt', o.trace) end,
        updated_at = now()
    from outcomes o
    where r.id = o.id and r.lease_token = o.token and r.status = 'leased'
      and (select count(*) from counters) >= 0
    returning r.id, r.type, r.concurrency_key
), returned as (
    -- The leases ended here, added to each counter's returned row once (0020); the runs
    -- say lease_returned, so the trigger that counts other writers' lease ends skips them.
    update {schema}workflow_concurrency_returned s
    set returned = s.returned + e.leases
    from (select d.type, k.concurrency_key, count(*) as leases
          from done d
          cross join lateral (values (''), (d.concurrency_key)) as k(concurrency_key)
          where k.concurrency_key is not null
          group by d.type, k.concurrency_key) as e
    where s.workflow_name = e.type and s.concurrency_key = e.concurrency_key
), release_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'released', jsonb_build_object('worker_id', %(worker_id)s::text, 'reason', %(reason)s::text)
    from done
)
select id from done

-- name: release_runs_plain
-- release_runs, for runs whose claim counted no lease (claim_plain's, and claim's of
-- types without a concurrency limit): no counters to lock or add to.
-- A release keeps the run's suspect mark: giving a run back says nothing about it.
with outcomes as (
    select * from jsonb_to_recordset(%(items)s::jsonb)
        as o(id uuid, token uuid, delay float8, trace jsonb)
), done as (
    update {schema}workflow_run r
    set status = 'pending', leased_by = null, lease_until = null, lease_token = null,
        logged_changes = logged_changes + 1,
        -- a type limited since the claim (set_registry_concurrency counted this
        -- lease): the trigger gives it back
        lease_returned = not exists (select from {schema}workflow_concurrency_returned t
                                     where t.workflow_name = r.type),
        -- given back now, a run keeps its place in the queue; later, it waits its turn
        run_at = case when o.delay > 0 then now() + make_interval(secs => o.delay)
                      else r.run_at end,
        -- the attempt given back, for the next one to link to (none: forget the last);
        -- a context that is no object (written by hand) is kept, or replaced
        trace_context = case when jsonb_typeof(r.trace_context) is distinct from 'object'
                             then case when o.trace is null then r.trace_context
                                       else jsonb_build_object('attempt', o.trace) end
                             when o.trace is null then r.trace_context - 'attempt'
                             else r.trace_context || jsonb_build_object('attempt', o.trace) end,
        updated_at = now()
    from outcomes o
    where r.id = o.id and r.lease_token = o.token and r.status = 'leased'
    returning r.id, r.type, r.concurrency_key
), release_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'released', jsonb_build_object('worker_id', %(worker_id)s::text, 'reason', %(reason)s::text)
    from done
)
select id from done

-- name: expired_leases
select id, type, attempt, max_attempts, leased_by, lease_token, isolate, crashes
from {schema}workflow_run
where status = 'leased' and lease_until < now() and type = any(%(types)s::text[])
  -- a type another runtime owns is that runtime's to recover
  and not exists (
      select 1 from {schema}workflow_registry g
      where g.workflow_name = type and g.runtime <> %(runtime)s
  )
order by lease_until
limit %(limit)s
for update skip locked

-- name: next_lease_expiry
-- Seconds until the first lease of these types runs out (negative: one has), for the
-- reaper to sleep until then: the first row of idx_workflow_run_lease_expiry that
-- matches, not a count of leases.
select extract(epoch from lease_until - now())::float8 as seconds
from {schema}workflow_run
where status = 'leased' and type = any(%(types)s::text[])
  and not exists (
      select 1 from {schema}workflow_registry g
      where g.workflow_name = type and g.runtime <> %(runtime)s
  )
order by lease_until
limit 1

-- Durable execution: the journal, suspension, signals, children.
--
-- waiting_for holds one wait ({"kind": "signal", "event": ...}, {"kind": "child",
-- "child_id": ...} ...) or, for a run waiting in parallel branches, {"kind": "any",
-- "waits": [one wait each]}. The statements that wake a run (here, and woken_parents
-- above) read both as one list: coalesce(waiting_for -> 'waits', jsonb_build_array(...)).

-- name: load_journal
select step_name, kind, position, status, output, attempts, started_at, completed_at
from {schema}workflow_step
where run_id = %(run_id)s
order by position

-- name: record_step
-- Journal a step (fenced by the lease) with its audit events, in one statement.
-- The lease is checked under FOR SHARE, which conflicts with the row lock of an UPDATE
-- (FOR KEY SHARE would not): a cancel or a lease rescue that has changed the run but not
-- committed makes this wait, and then read the run as it left it. A plain read would see
-- the run still leased, and journal the step after the run's terminal event.
with lease as (
    select id from {schema}workflow_run
    where id = %(run_id)s and lease_token = %(token)s and status = 'leased'
      and lease_until > now()
    for share
), saved as (
    insert into {schema}workflow_step
        (run_id, step_name, kind, position, status, output, attempts, started_at, completed_at)
    select id, %(name)s, %(kind)s, %(position)s, %(status)s, %(output)s::jsonb, %(attempts)s,
           coalesce(%(started_at)s::timestamptz, now()),
           case when %(status)s = 'completed' then now() end
    from lease
    on conflict (run_id, step_name) do update
    set status = excluded.status, output = excluded.output, attempts = excluded.attempts,
        completed_at = excluded.completed_at
    where {schema}workflow_step.status = 'retrying'
    returning run_id
), step_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data, created_at)
    select s.run_id, e.value ->> 'type', e.value -> 'data',
           coalesce((e.value ->> 'at')::timestamptz, now())
    from saved s
    cross join jsonb_array_elements(%(events)s::jsonb) with ordinality as e(value, n)
    order by e.n
)
select run_id from saved

-- name: trim_journal
-- Delete journal entries of a run (a durable loop's old iterations), fenced by the lease
-- under FOR SHARE as in record_step; held is 0 when the lease was lost.
with lease as (
    select id from {schema}workflow_run
    where id = %(run_id)s and lease_token = %(token)s and status = 'leased'
      and lease_until > now()
    for share
), trimmed as (
    delete from {schema}workflow_step s
    using lease
    where s.run_id = lease.id
      and s.step_name in (select jsonb_array_elements_text(%(names)s::jsonb))
    returning 1
)
select (select count(*) from lease) as held, (select count(*) from trimmed) as trimmed

-- name: record_steps
-- Journal the steps of many runs at once (group commit), each fenced by its own lease,
-- checked under FOR SHARE as in record_step. A run whose row is locked by an UPDATE (a
-- cancel, a rescue, a heartbeat or an outcome in flight) is skipped rather than waited
-- for: holding the share locks of some runs while waiting for another could deadlock
-- with a batched UPDATE that locks them in another order. The caller journals skipped
-- steps one at a time with record_step, which waits.
with items as (
    select * from jsonb_to_recordset(%(items)s::jsonb)
        as i(n integer, run_id uuid, token uuid, name text, kind text, position integer,
             status text, output text, attempts integer, started_at timestamptz, events jsonb)
), locked as (
    select r.id, r.lease_token from {schema}workflow_run r
    where r.id = any(array(select run_id from items)) and r.status = 'leased'
      and r.lease_until > now()
    for share skip locked
), leased as (
    select i.* from items i join locked r on r.id = i.run_id and r.lease_token = i.token
), saved as (
    insert into {schema}workflow_step
        (run_id, step_name, kind, position, status, output, attempts, started_at, completed_at)
    select run_id, name, kind, position, status, output::jsonb, attempts,
           coalesce(started_at, now()),
           case when status = 'completed' then now() end
    from leased
    order by n
    on conflict (run_id, step_name) do update
    set status = excluded.status, output = excluded.output, attempts = excluded.attempts,
        completed_at = excluded.completed_at
    where {schema}workflow_step.status = 'retrying'
    returning run_id, step_name
), step_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data, created_at)
    select s.run_id, e.value ->> 'type', e.value -> 'data',
           coalesce((e.value ->> 'at')::timestamptz, now())
    from saved s
    join items i on i.run_id = s.run_id and i.name = s.step_name
    cross join jsonb_array_elements(i.events) with ordinality as e(value, k)
    order by i.n, e.k
)
select run_id::text as run_id, step_name from saved

-- name: suspend_runs
-- One event per wait the run is suspended in (o.events), each with the run's due time.
with outcomes as (
    select * from jsonb_to_recordset(%(items)s::jsonb)
        as o(id uuid, token uuid, run_at timestamptz, delay float8, waiting_for jsonb,
             events jsonb, trace jsonb)
), counters as (
    -- The returned rows of these runs' concurrency counters (0015, 0018, 0020), locked
    -- in key order before returned below adds to them: no two outcomes wait on each
    -- other in a cycle (claims never lock these rows). Each by its primary key (a join
    -- on the type alone reads every key's row per run); none for types without a limit.
    select 1
    from {schema}workflow_concurrency_returned s
    where (s.workflow_name, s.concurrency_key) in (
        select x.type, k.concurrency_key
        from {schema}workflow_run x
        cross join lateral (values (''), (x.concurrency_key)) as k(concurrency_key)
        -- the array makes this primary-key lookups; a semi-join may scan the whole table
        where x.id = any(array(select id from outcomes))
    )
      -- a type's own row ('') is locked by every outcome of the type, so its keys' rows,
      -- written only under it, need no lock of their own (a WAL record less per key);
      -- a type limited per key alone locks its keys' rows
      and (s.concurrency_key = ''
           or not exists (select from {schema}workflow_concurrency_returned t
                          where t.workflow_name = s.workflow_name and t.concurrency_key = ''))
    order by s.workflow_name, s.concurrency_key
    for update of s
), done as (
    update {schema}workflow_run r
    set status = 'pending',
        logged_changes = logged_changes + 1,
        run_at = least(coalesce(o.run_at, now() + make_interval(secs => o.delay)),
                       coalesce(r.deadline, 'infinity')),
        waiting_for = o.waiting_for,
        leased_by = null, lease_until = null, lease_token = null, lease_returned = true,
        isolate = false, crashes = 0,
        -- the attempt given back, for the next one to link to (none: forget the last);
        -- a context that is no object (written by hand) is kept, or replaced
        trace_context = case when jsonb_typeof(r.trace_context) is distinct from 'object'
                             then case when o.trace is null then r.trace_context
                                       else jsonb_build_object('attempt', o.trace) end
                             when o.trace is null then r.trace_context - 'attempt'
                             else r.trace_context || jsonb_build_object('attempt', o.trace) end,
        updated_at = now()
    from outcomes o
    where r.id = o.id and r.lease_token = o.token and r.status = 'leased'
      and (select count(*) from counters) >= 0
    returning r.id, r.run_at, r.type, r.concurrency_key
), returned as (
    -- The leases ended here, added to each counter's returned row once (0020); the runs
    -- say lease_returned, so the trigger that counts other writers' lease ends skips them.
    update {schema}workflow_concurrency_returned s
    set returned = s.returned + e.leases
    from (select d.type, k.concurrency_key, count(*) as leases
          from done d
          cross join lateral (values (''), (d.concurrency_key)) as k(concurrency_key)
          where k.concurrency_key is not null
          group by d.type, k.concurrency_key) as e
    where s.workflow_name = e.type and s.concurrency_key = e.concurrency_key
), suspend_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select d.id, e.value ->> 'type', (e.value -> 'data') || jsonb_build_object('until', d.run_at)
    from done d
    join outcomes o on o.id = d.id
    cross join jsonb_array_elements(o.events) with ordinality as e(value, n)
    order by d.id, e.n
)
select id from done

-- name: wake_suspended
-- Second statement of a suspension: a signal or child result that arrived while the run
-- was still leased wakes it at once (the run row lock orders this against senders), for
-- any of the waits it suspended in.
update {schema}workflow_run r
set run_at = now(), updated_at = now()
where r.id = any(%(ids)s::uuid[])
  and r.status = 'pending'
  and r.run_at > now()
  and exists (
      select 1
      from jsonb_array_elements(coalesce(r.waiting_for -> 'waits',
                                         jsonb_build_array(r.waiting_for))) as w
      where exists (
                select 1 from {schema}workflow_signal s
                where s.run_id = r.id and s.consumed_at is null
                  and s.event = w ->> 'event'
                  and (w -> 'match' is null or s.payload @> (w -> 'match'))
            )
         -- A scalar subquery, looked up by key for each wait: as "exists" the planner
         -- may hash every finished run instead.
         or (select c.status from {schema}workflow_run c
             where c.id = (w ->> 'child_id')::uuid) in ('succeeded', 'failed', 'cancelled')
  )
returning r.id

-- name: lock_run
select id, status from {schema}workflow_run where id = %(id)s for update

-- name: insert_signal
with signal as (
    insert into {schema}workflow_signal (run_id, event, payload)
    values (%(id)s, %(event)s, %(payload)s::jsonb)
    returning id, run_id
), signal_event as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select run_id, 'signal_received', jsonb_build_object('event', %(event)s::text, 'signal_id', id)
    from signal
)
select id from signal

-- name: wake_for_signal
-- Wakes the run if any of the waits it is suspended in takes this signal.
update {schema}workflow_run r
set run_at = now(), updated_at = now()
where r.id = %(id)s
  and r.status = 'pending'
  and r.run_at > now()
  and exists (
      select 1
      from jsonb_array_elements(coalesce(r.waiting_for -> 'waits',
                                         jsonb_build_array(r.waiting_for))) as w
      where w ->> 'event' = %(event)s
        and (w -> 'match' is null or %(payload)s::jsonb @> (w -> 'match'))
  )
returning r.id

-- name: consume_signal_journaled
-- Take the oldest matching signal and journal it as the wait's output: one statement, so
-- a signal is consumed only together with its journal entry, in one round trip.
with lease as (
    -- FOR SHARE: see record_step.
    select id from {schema}workflow_run
    where id = %(run_id)s and lease_token = %(token)s and status = 'leased'
      and lease_until > now()
    for share
), taken as (
    update {schema}workflow_signal s
    set consumed_at = now(), step_name = %(name)s
    from (
        select s2.id from {schema}workflow_signal s2
        where s2.run_id = (select id from lease) and s2.event = %(event)s
          and s2.consumed_at is null
          and (%(match)s::jsonb is null or s2.payload @> %(match)s::jsonb)
        order by s2.id
        limit 1
        for update
    ) as c
    where s.id = c.id
    returning s.run_id, s.payload, s.created_at
), saved as (
    insert into {schema}workflow_step
        (run_id, step_name, kind, position, status, output, attempts, started_at, completed_at)
    select run_id, %(name)s, %(kind)s, %(position)s, 'completed',
           jsonb_build_object('signal', payload), %(attempts)s,
           coalesce(%(started_at)s::timestamptz, now()), now()
    from taken
    on conflict (run_id, step_name) do update
    set status = excluded.status, output = excluded.output, attempts = excluded.attempts,
        completed_at = excluded.completed_at
    where {schema}workflow_step.status = 'retrying'
    returning run_id
), step_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data, created_at)
    select s.run_id, e.value ->> 'type', e.value -> 'data',
           coalesce((e.value ->> 'at')::timestamptz, now())
    from saved s
    cross join jsonb_array_elements(%(events)s::jsonb) with ordinality as e(value, n)
    order by e.n
)
select t.payload, t.created_at, exists (select 1 from saved) as saved from taken t

-- name: take_rate_token
-- A step's token of a rate limit (0016, docs/flow-control.md), journaled with it: taken
-- from the same window row as the claims of the types that obey the limit, and as they
-- take theirs (insert ... on conflict do update locks the row's newest version, so two
-- takers never both get the last token), only while the lease holds (FOR SHARE: see
-- record_step). One row back: whether the lease was held and the limit exists, and
-- whether a token was granted, else when the limit's next window opens.
with lease as (
    select id from {schema}workflow_run
    where id = %(run_id)s and lease_token = %(token)s and status = 'leased'
      and lease_until > now()
    for share
), rate as (
    select l.name, l.max_runs, l.period,
           case when l.per_key then coalesce(%(key)s::text, '') else '' end as rate_key
    from {schema}workflow_rate_limit l
    where l.name = %(limit)s and exists (select from lease)
), windows as (
    insert into {schema}workflow_rate_window as w (name, rate_key, window_start, used, granted)
    select name, rate_key, to_timestamp(floor(extract(epoch from now()) / period) * period), 1, 1
    from rate
    on conflict (name, rate_key) do update
    set granted = case when w.window_start < excluded.window_start
                         or w.used < (select max_runs from rate) then 1 else 0 end,
        used = case when w.window_start < excluded.window_start then 1
                    when w.used < (select max_runs from rate) then w.used + 1
                    else w.used end,
        window_start = greatest(w.window_start, excluded.window_start)
    returning w.granted,
              w.window_start + (select period from rate) * interval '1 second' as next_window
), saved as (
    insert into {schema}workflow_step
        (run_id, step_name, kind, position, status, output, attempts, started_at, completed_at)
    select id, %(name)s, %(kind)s, %(position)s, 'completed', %(output)s::jsonb, 1, now(), now()
    from lease
    where exists (select from windows where granted = 1)
    on conflict (run_id, step_name) do update
    set status = excluded.status, output = excluded.output, attempts = excluded.attempts,
        completed_at = excluded.completed_at
    where {schema}workflow_step.status = 'retrying'
    returning run_id
)
select exists (select from lease) as held,
       exists (select from {schema}workflow_rate_limit where name = %(limit)s) as known,
       coalesce(w.granted, 0) = 1 as granted, w.next_window,
       (select count(*) from saved) as saved
from (values (1)) as one (n)
left join windows w on true

-- Operator statements: runs counted by state, how late each queue is, a retry, a purge.

-- name: count_runs
-- Runs by type and status; for a pending run also the kinds of wait it is suspended in
-- (all of them, comma-separated, for a run waiting in parallel branches), and 'retry' for
-- one due again after a failed attempt. Reads every run that is not deleted.
select type, status,
       case when status <> 'pending' then null
            when waiting_for is null then case when attempt > 0 then 'retry' end
            when jsonb_typeof(waiting_for -> 'waits') = 'array'
                then (select string_agg(distinct w ->> 'kind', ',')
                      from jsonb_array_elements(waiting_for -> 'waits') as w)
            else waiting_for ->> 'kind' end as waits,
       count(*) as runs
from {schema}workflow_run
where deleted_at is null
group by 1, 2, 3

-- name: oldest_due
-- Seconds since the oldest due pending run of each type became due. The recursion walks
-- idx_workflow_run_due from one type to the next, and each type's first entry is its
-- oldest pending run: one probe per type instead of a read of every due run.
with recursive types (type) as (
    (select type from {schema}workflow_run
     where status = 'pending' and deleted_at is null
     order by type limit 1)
    union all
    select (select r.type from {schema}workflow_run r
            where r.status = 'pending' and r.deleted_at is null and r.type > t.type
            order by r.type limit 1)
    from types t
    where t.type is not null
)
select t.type, extract(epoch from now() - o.run_at)::float8 as seconds
from types t
cross join lateral (
    select r.run_at from {schema}workflow_run r
    where r.type = t.type and r.status = 'pending' and r.deleted_at is null
    order by r.run_at limit 1
) as o
where o.run_at <= now()

-- name: live_runs
-- What is under way, for a metrics scrape: one statement that reads no finished run.
-- Pending runs by type (all of them, the due ones, and how late the oldest is) from
-- idx_workflow_run_due alone; leased runs by type and holder through
-- idx_workflow_run_lease_expiry (as many as the workers run at once); the registry (one
-- row per type), so that a registered type with nothing under way still has its zeros.
-- The column past counts runs whose time has come: due (pending), or lease run out (leased).
select 'pending' as kind, type, null::text as holder, count(*) as runs,
       count(*) filter (where run_at <= now()) as past,
       extract(epoch from now() - min(run_at))::float8 as seconds, null::boolean as enabled
from {schema}workflow_run
where status = 'pending' and deleted_at is null
group by type
union all
select 'leased', type, leased_by, count(*), count(*) filter (where lease_until < now()),
       null, null
from {schema}workflow_run
where status = 'leased'
group by type, leased_by
union all
select 'registered', workflow_name, null, 0, 0, null, is_enabled
from {schema}workflow_registry

-- name: lock_run_row
select * from {schema}workflow_run where id = %(id)s for update

-- name: retry_run
-- A new attempt on a failed or cancelled run, locked and checked by the caller: due now,
-- with the attempts it was given. Steps that used up their attempts run again (the rest
-- of the journal replays); the audit event keeps the error.
with retried as (
    update {schema}workflow_run
    set status = 'pending', run_at = now(), max_attempts = %(max_attempts)s,
        logged_changes = logged_changes + 1,
        leased_by = null, lease_until = null, lease_token = null, waiting_for = null,
        isolate = false, crashes = 0, updated_at = now()
    where id = %(id)s and status = %(status)s
    returning *
), retried_event as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'retried_by_operator', %(data)s::jsonb from retried
), reopened_steps as (
    update {schema}workflow_step
    set output = null
    where run_id = (select id from retried)
      and status = 'retrying' and kind = 'step' and output ->> 'gave_up' is not null
)
select * from retried

-- name: fork_run
-- A fork (0029, admin.fork): a new run of the original's type, with the given payload or
-- the original's, whose journal is the original's entries before position %(position)s,
-- copied here rather than through Python. The fork point's own scope (a loop's or a
-- join's entries under '<step>/') and the rollback phase are left out: they run again.
-- The original is read, never written. The insert trigger writes the fork's created
-- event and wakes the workers of its type, as for any start.
with started as (
    insert into {schema}workflow_run
        (id, type, payload, priority, max_attempts, concurrency_key, retention,
         retention_fixed, forked_from, forked_at_step)
    select %(new_id)s::uuid, o.type, coalesce(%(payload)s::jsonb, o.payload), o.priority,
           o.max_attempts, o.concurrency_key, o.retention, o.retention_fixed, o.id,
           %(step)s::text
    from {schema}workflow_run o
    where o.id = %(id)s
    returning *
), copied as (
    insert into {schema}workflow_step
        (run_id, step_name, kind, position, status, output, attempts, started_at,
         completed_at)
    select f.id, s.step_name, s.kind, s.position, s.status, s.output, s.attempts,
           s.started_at, s.completed_at
    from {schema}workflow_step s
    cross join started f
    where s.run_id = %(id)s and s.position < %(position)s::integer
      and s.kind <> 'rollback' and left(s.step_name, 9) <> 'rollback/'
      and left(s.step_name, length(%(step)s::text) + 1) <> %(step)s::text || '/'
)
select * from started

-- name: list_forks
-- The runs forked from a run, oldest first, through idx_workflow_run_forked_from.
select * from {schema}workflow_run
where forked_from = %(id)s
order by created_at, id
limit %(limit)s

-- name: purge_runs
-- Up to :limit finished runs (and soft-deleted ones no worker holds) unchanged for
-- :older_than seconds; their events and journal go by trigger, their signals by cascade.
-- A child whose parent is under way stays: the parent may yet read its outcome.
with doomed as (
    select r.id from {schema}workflow_run r
    where r.updated_at <= now() - make_interval(secs => %(older_than)s)
      and (r.status in ('succeeded', 'failed', 'cancelled')
           or (r.deleted_at is not null and r.status <> 'leased'))
      and (%(type)s::text is null or r.type = %(type)s)
      and not exists (
          select 1 from {schema}workflow_run p
          where p.id = r.parent_id and p.status in ('pending', 'leased')
      )
    limit %(limit)s
    for update skip locked
)
delete from {schema}workflow_run r
using doomed d
where r.id = d.id
returning r.type

-- Retention (migrations 0012, 0022). A run is past its retention when it finished
-- (succeeded, failed or cancelled) at least its retention ago: the one fixed when it was
-- created (its own, else its type's of then), else the default; never longer than the
-- ceiling. Runs created before 0022 (not retention_fixed) without one of their own
-- follow their type's retention as it is now. Pending and leased
-- runs (sleeping and waiting ones are pending) are never candidates, however old. Nor is
-- a run whose parent row still exists: deleting the parent sets parent_id to null, and
-- the child is a candidate from then on. So an unfinished parent never loses a child,
-- and two sweepers never wait for rows the other holds (a parent's delete touches only
-- its children, which no sweep has taken).
--
-- Candidates are read by index at any size: runs with a retention are walked one index
-- probe per distinct retention (idx_workflow_run_expiry_own), then each one's expired
-- range, oldest first; runs without, by finishing time (idx_workflow_run_expiry_default);
-- runs created before 0022 without one, by type the same way
-- (idx_workflow_run_expiry_by_type). Every range read holds only expired runs.

-- name: sweep_runs
-- Up to :limit runs past their retention, rows other transactions hold skipped; their
-- events and journal go by trigger, their signals by cascade.
with recursive kinds (type) as (
    (select type from {schema}workflow_run
     where status in ('succeeded', 'failed', 'cancelled')
       and retention is null and parent_id is null and not retention_fixed
     order by type limit 1)
    union all
    select (select r.type from {schema}workflow_run r
            where r.status in ('succeeded', 'failed', 'cancelled')
              and r.retention is null and r.parent_id is null and not r.retention_fixed
              and r.type > k.type
            order by r.type limit 1)
    from kinds k
    where k.type is not null
), spans (retention) as (
    (select retention from {schema}workflow_run
     where status in ('succeeded', 'failed', 'cancelled')
       and retention is not null and parent_id is null
     order by retention limit 1)
    union all
    select (select r.retention from {schema}workflow_run r
            where r.status in ('succeeded', 'failed', 'cancelled')
              and r.retention is not null and r.parent_id is null
              and r.retention > s.retention
            order by r.retention limit 1)
    from spans s
    where s.retention is not null
), doomed as (
    select d.id from kinds k
    left join {schema}workflow_registry g on g.workflow_name = k.type
    cross join lateral (
        select r.id from {schema}workflow_run r
        where r.type = k.type
          and r.status in ('succeeded', 'failed', 'cancelled')
          and r.retention is null and r.parent_id is null and not r.retention_fixed
          and r.updated_at <= now() - least(coalesce(g.retention,
                                                     make_interval(secs => %(default)s)),
                                            make_interval(secs => %(ceiling)s))
        order by r.updated_at
        limit %(limit)s
        for update of r skip locked
    ) as d
    union all
    select d.id from spans s
    cross join lateral (
        select r.id from {schema}workflow_run r
        where r.retention = s.retention
          and r.status in ('succeeded', 'failed', 'cancelled')
          and r.retention is not null and r.parent_id is null
          and r.updated_at <= now() - least(s.retention, make_interval(secs => %(ceiling)s))
        order by r.updated_at
        limit %(limit)s
        for update of r skip locked
    ) as d
    union all
    select d.id from (
        select r.id from {schema}workflow_run r
        where r.status in ('succeeded', 'failed', 'cancelled')
          and r.retention is null and r.parent_id is null and r.retention_fixed
          and r.updated_at <= now() - make_interval(secs => least(%(default)s, %(ceiling)s))
        order by r.updated_at
        limit %(limit)s
        for update of r skip locked
    ) as d
)
-- The ids as an array: each found by primary key, never by a hash of the whole table.
delete from {schema}workflow_run r
where r.id = any(array(select id from doomed limit %(limit)s))
returning r.type

-- name: count_expired
-- What sweep_runs would delete now, by type (the children of runs it deletes become
-- candidates only then). Reads the same index ranges; locks nothing.
with recursive kinds (type) as (
    (select type from {schema}workflow_run
     where status in ('succeeded', 'failed', 'cancelled')
       and retention is null and parent_id is null and not retention_fixed
     order by type limit 1)
    union all
    select (select r.type from {schema}workflow_run r
            where r.status in ('succeeded', 'failed', 'cancelled')
              and r.retention is null and r.parent_id is null and not r.retention_fixed
              and r.type > k.type
            order by r.type limit 1)
    from kinds k
    where k.type is not null
), spans (retention) as (
    (select retention from {schema}workflow_run
     where status in ('succeeded', 'failed', 'cancelled')
       and retention is not null and parent_id is null
     order by retention limit 1)
    union all
    select (select r.retention from {schema}workflow_run r
            where r.status in ('succeeded', 'failed', 'cancelled')
              and r.retention is not null and r.parent_id is null
              and r.retention > s.retention
            order by r.retention limit 1)
    from spans s
    where s.retention is not null
), expired (type, runs) as (
    select k.type, d.runs from kinds k
    left join {schema}workflow_registry g on g.workflow_name = k.type
    cross join lateral (
        select count(*) as runs from {schema}workflow_run r
        where r.type = k.type
          and r.status in ('succeeded', 'failed', 'cancelled')
          and r.retention is null and r.parent_id is null and not r.retention_fixed
          and r.updated_at <= now() - least(coalesce(g.retention,
                                                     make_interval(secs => %(default)s)),
                                            make_interval(secs => %(ceiling)s))
    ) as d
    union all
    select d.type, d.runs from spans s
    cross join lateral (
        select r.type, count(*) as runs from {schema}workflow_run r
        where r.retention = s.retention
          and r.status in ('succeeded', 'failed', 'cancelled')
          and r.retention is not null and r.parent_id is null
          and r.updated_at <= now() - least(s.retention, make_interval(secs => %(ceiling)s))
        group by r.type
    ) as d
    union all
    select r.type, count(*) as runs from {schema}workflow_run r
    where r.status in ('succeeded', 'failed', 'cancelled')
      and r.retention is null and r.parent_id is null and r.retention_fixed
      and r.updated_at <= now() - make_interval(secs => least(%(default)s, %(ceiling)s))
    group by r.type
)
select type, sum(runs)::bigint as runs from expired
where runs > 0
group by type
order by type

-- name: hold_service_lease
-- Take or renew the lease of a fleet-wide service: a row comes back while the caller
-- holds it (it held it already, or the last holder let it expire), none otherwise.
insert into {schema}workflow_service_lease as l (name, holder, lease_until)
values (%(name)s, %(holder)s, now() + make_interval(secs => %(seconds)s))
on conflict (name) do update
set holder = excluded.holder, lease_until = excluded.lease_until, updated_at = now()
where l.holder = excluded.holder or l.lease_until <= now()
returning holder

-- name: release_service_lease
delete from {schema}workflow_service_lease
where name = %(name)s and holder = %(holder)s
-- Topics (migration 0010): subscriptions of workflow types to topic patterns.

-- name: subscribe
-- Subscribing again keeps the subscription and takes the new start options.
insert into {schema}workflow_subscription (pattern, workflow_type, priority, max_attempts)
values (%(pattern)s, %(type)s, %(priority)s, %(max_attempts)s)
on conflict (pattern, workflow_type) do update
set priority = excluded.priority, max_attempts = excluded.max_attempts, updated_at = now()
returning *

-- name: unsubscribe
delete from {schema}workflow_subscription
where pattern = %(pattern)s and workflow_type = %(type)s
returning pattern

-- name: list_subscriptions
-- Every subscription, of one type or all, or those whose pattern matches a topic: the
-- topic is LIKE the pattern's topic_like and, unless the pattern ends in '#', has as many
-- segments (so that the wildcard standing for a '*' takes no '.'). The same test as the
-- publishing statement of docs/topics.md; the table is small and read whole.
select * from {schema}workflow_subscription
where (%(type)s::text is null or workflow_type = %(type)s)
  and (%(topic)s::text is null
       or (%(topic)s::text like topic_like escape '\'
           and (segments is null
                or segments = length(%(topic)s::text)
                              - length(replace(%(topic)s::text, '.', '')) + 1)))
order by pattern, workflow_type

-- Schedules (migration 0014): cron schedules and the scheduler's reads and writes.

-- name: upsert_schedule
-- Creating again changes the definition and keeps the schedule's pause; the next tick is
-- planned again only when the cron expression or time zone changed (or none was).
insert into {schema}workflow_schedule as s
    (name, workflow_type, cron, timezone, payload, missed, priority, max_attempts,
     next_tick_at, in_code)
values (%(name)s, %(type)s, %(cron)s, %(timezone)s, %(payload)s::jsonb, %(missed)s,
        %(priority)s, %(max_attempts)s, %(next_tick_at)s, %(in_code)s)
on conflict (name) do update
set workflow_type = excluded.workflow_type, cron = excluded.cron,
    timezone = excluded.timezone, payload = excluded.payload, missed = excluded.missed,
    priority = excluded.priority, max_attempts = excluded.max_attempts,
    in_code = excluded.in_code, error = null, updated_at = now(),
    next_tick_at = case when s.cron = excluded.cron and s.timezone = excluded.timezone
                             and s.next_tick_at is not null
                        then s.next_tick_at else excluded.next_tick_at end
returning *

-- name: get_schedule
select * from {schema}workflow_schedule where name = %(name)s

-- name: list_schedules
select * from {schema}workflow_schedule
where %(type)s::text is null or workflow_type = %(type)s
order by name

-- name: set_schedule_paused
-- Resuming plans the first tick after now: the ticks of the pause are not caught up.
update {schema}workflow_schedule
set paused = %(paused)s, error = null, updated_at = now(),
    next_tick_at = case when paused and not %(paused)s then %(next_tick_at)s
                        else next_tick_at end
where name = %(name)s
returning *

-- name: delete_schedule
delete from {schema}workflow_schedule where name = %(name)s returning name

-- name: due_schedules
-- The scheduler's read, by the partial index: the schedules due by the database's clock
-- (or not planned yet), earliest first.
select * from {schema}workflow_schedule
where not paused and (next_tick_at <= now() or next_tick_at is null)
order by next_tick_at nulls first
limit %(limit)s

-- name: next_schedule_tick
-- The database's clock, and the earliest tick after it: how long the scheduler may sleep.
select now() as db_now,
       (select min(next_tick_at) from {schema}workflow_schedule
        where not paused and next_tick_at > now()) as next_due

-- name: advance_schedule
-- Compare and set: only the scheduler that read this next tick moves it on; one that
-- raced it finds another value and starts nothing.
update {schema}workflow_schedule
set next_tick_at = %(next_tick_at)s, last_tick_at = coalesce(%(last_tick_at)s, last_tick_at),
    updated_at = now()
where name = %(name)s and not paused and next_tick_at is not distinct from %(old)s
returning name

-- name: break_schedule
-- A schedule the scheduler cannot read (written with plain SQL): paused, with the reason.
update {schema}workflow_schedule
set paused = true, error = %(error)s, updated_at = now()
where name = %(name)s and next_tick_at is not distinct from %(old)s
returning name

-- The dashboard's reads: outcomes per minute, the workers seen through their leases, a
-- run's children.

-- name: outcomes_per_minute
-- Runs that finished (succeeded, failed) and attempts that failed and will be retried,
-- per minute, over the last :minutes minutes (the current one included), read from
-- idx_workflow_event_outcomes alone; the database's current minute comes first, alone
-- when nothing happened.
with clock as (select date_trunc('minute', now()) as now_minute)
select c.now_minute, e.minute, e.event_type, e.events
from clock c
left join (
    select date_trunc('minute', created_at) as minute, event_type, count(*) as events
    from {schema}workflow_event, clock
    where event_type in ('succeeded', 'failed', 'retried')
      and created_at >= clock.now_minute - make_interval(mins => %(minutes)s - 1)
    group by 1, 2
) e on true
order by e.minute

-- name: lease_holders
-- The workers that hold leases, by type, through idx_workflow_run_lease_expiry: a run's
-- updated_at is its last claim or heartbeat while it is leased.
select leased_by, type, count(*) as runs, min(lease_until) as next_expiry,
       max(updated_at) as last_renewed, count(*) filter (where lease_until < now()) as expired
from {schema}workflow_run
where status = 'leased' and leased_by is not null
group by leased_by, type
order by leased_by, type

-- name: list_children
-- A run's children, oldest first, through idx_workflow_run_parent.
select * from {schema}workflow_run
where parent_id = %(id)s
order by created_at, id
limit %(limit)s

-- Worker presence (migration 0019, docs/workers.md#presence).

-- name: worker_seen
-- A worker's row, upserted once per heartbeat interval: live until seen_until. Starting,
-- it (re)starts the row: a worker id reused by a new process is a new worker.
insert into {schema}workflow_worker as w
    (worker_id, host, pid, runtime, type_prefixes, concurrency, version, seen_until)
values (%(worker_id)s, %(host)s, %(pid)s, %(runtime)s, %(type_prefixes)s::jsonb,
        %(concurrency)s, %(version)s, now() + make_interval(secs => %(seconds)s))
on conflict (worker_id) do update
set host = excluded.host, pid = excluded.pid, runtime = excluded.runtime,
    type_prefixes = excluded.type_prefixes, concurrency = excluded.concurrency,
    version = excluded.version,
    started_at = case when %(starting)s or w.stopped_at is not null
                      then now() else w.started_at end,
    last_seen_at = now(), seen_until = excluded.seen_until, stopped_at = null

-- name: worker_stopped
-- A graceful stop: gone from now on, and said to have stopped rather than died.
update {schema}workflow_worker
set stopped_at = now(), last_seen_at = now(), seen_until = now()
where worker_id = %(worker_id)s and pid = %(pid)s and stopped_at is null

-- name: list_workers
-- The workers live now, and those gone (stopped, or no longer seen) within the window.
select *, now() as now, seen_until >= now() and stopped_at is null as live
from {schema}workflow_worker
where seen_until >= now() - make_interval(secs => %(window)s)
order by worker_id

-- name: forget_workers
-- Workers gone longer than older_than: their rows go (the retention sweep, a purge).
delete from {schema}workflow_worker
where seen_until < now() - make_interval(secs => %(older_than)s)

-- name: end_session
-- A dashboard session logged out (migration 0024): every process refuses its cookie
-- from now on. Logging out twice keeps the first row.
insert into {schema}workflow_dashboard_logout (nonce, expires_at)
values (%(nonce)s, %(expires_at)s)
on conflict (nonce) do nothing

-- name: session_ended
-- Read on every request of a logged-in dashboard session: one lookup by primary key.
select 1 as ended from {schema}workflow_dashboard_logout where nonce = %(nonce)s

-- name: forget_ended_sessions
-- Logouts of sessions that have expired anyway (grace: how far the clocks of the
-- processes may disagree), deleted at each logout through the index on expires_at.
delete from {schema}workflow_dashboard_logout
where expires_at < now() - make_interval(secs => %(grace)s)

-- name: payload_index_state
-- The optional payload index (backends/payload_index.py): whether it exists, whether it
-- serves queries (an interrupted `create index concurrently` leaves it invalid), its size.
select i.indisvalid as valid, pg_relation_size(i.indexrelid) as size
from pg_index i
join pg_class c on c.oid = i.indexrelid
join pg_namespace n on n.oid = c.relnamespace
where n.nspname = %(schema)s and c.relname = 'idx_workflow_run_payload'

-- name: payload_index_try_lock
-- One create or drop of the payload index at a time per schema. A session lock, tried
-- and not waited for: a session waiting on it holds a snapshot, which a concurrent build
-- in the other session would wait for in turn.
select pg_try_advisory_lock(hashtext(%(key)s)) as locked

-- name: payload_index_unlock
select pg_advisory_unlock(hashtext(%(key)s))

-- name: create_payload_index
-- Concurrently: writes to the table go on while it is built (outside any transaction).
create index concurrently if not exists idx_workflow_run_payload
    on {schema}workflow_run using gin (payload jsonb_path_ops)

-- name: drop_payload_index
drop index concurrently if exists {schema}idx_workflow_run_payload

-- Values a run publishes (0027, ctx.set_value).

-- name: set_value
-- A run's value, replacing its key's last one (version counts the sets). Run after the
-- set's journal entry, in its transaction (JournalOps.set_value): written only with it.
-- The notification reaches readers waiting for the run's values (client.wait_value) as
-- the transaction commits.
with stored as (
    insert into {schema}workflow_value as v (run_id, key, value, step_name)
    values (%(run_id)s, %(key)s, %(value)s::jsonb, %(name)s)
    on conflict (run_id, key) do update
    set value = excluded.value, version = v.version + 1, step_name = excluded.step_name,
        updated_at = now()
    returning v.run_id, v.version
)
select s.version, pg_notify('simpleworkflow_value', s.run_id::text)::text as notified
from stored s

-- name: list_values
select run_id, key, value, version, step_name, updated_at
from {schema}workflow_value where run_id = %(id)s order by key

-- name: get_value
select run_id, key, value, version, step_name, updated_at
from {schema}workflow_value where run_id = %(id)s and key = %(key)s

-- name: await_value
-- A run's value :key and the run's status, of one moment: a reader waiting for the value
-- stops once the run has ended without it (a run sets no value after its end).
select r.status as run_status, r.id as run_id, v.key, v.value, v.version, v.step_name,
       v.updated_at
from {schema}workflow_run as r
left join {schema}workflow_value as v on v.run_id = r.id and v.key = %(key)s
where r.id = %(id)s

-- name: append_stream
-- Append items to one of a run's streams, fenced by the lease (checked under FOR SHARE as
-- in record_step): numbered after the stream's last item, in the order of their seq;
-- items already written by the same origin and seq (a step run again after a crash) are
-- left out. Returns whether the lease held, and how many items were written at which
-- offsets (for the observers); readers of the run are notified.
with lease as (
    select id from {schema}workflow_run
    where id = %(run_id)s and lease_token = %(token)s and status = 'leased'
      and lease_until > now()
    for share
), items as (
    select i.seq, i.value, i.closed
    from jsonb_to_recordset(%(items)s::jsonb) as i(seq integer, value text, closed boolean)
    where not exists (
        select 1 from {schema}workflow_stream_item s
        where s.run_id = %(run_id)s and s.stream_key = %(key)s
          and s.origin = %(origin)s and s.origin_seq = i.seq)
), saved as (
    insert into {schema}workflow_stream_item
        (run_id, stream_key, position, origin, origin_seq, value, closed)
    select lease.id, %(key)s,
           coalesce((select max(position) + 1 from {schema}workflow_stream_item
                     where run_id = %(run_id)s and stream_key = %(key)s), 0)
             + row_number() over (order by items.seq) - 1,
           %(origin)s, items.seq, items.value::jsonb, items.closed
    from lease, items
    returning position
), woken as (
    -- one notification per batch, for the run's readers (client.read_stream)
    select pg_notify('simpleworkflow_stream', %(run_id)s::text)
    where exists (select 1 from saved)
)
select exists (select 1 from lease) as held, (select count(*) from saved) as saved,
       (select min(position) from saved) as first_offset,
       (select max(position) from saved) as last_offset,
       (select count(*) from woken) as woken

-- name: read_stream
-- A page of a stream's items after position :after, and whether the run has ended (read
-- first: an item written before the run ended is then on this page or a later one).
select (select status from {schema}workflow_run where id = %(run_id)s) as run_status,
       i.position, i.value, i.closed, i.created_at
from (select 1) as one
left join lateral (
    select position, value, closed, created_at from {schema}workflow_stream_item
    where run_id = %(run_id)s and stream_key = %(key)s and position > %(after)s
    order by position
    limit %(limit)s
) as i on true
order by i.position

-- name: list_streams
-- A run's streams: each key with its item count and whether it was closed.
select stream_key, count(*) filter (where not closed) as items, bool_or(closed) as closed,
       max(created_at) as updated_at
from {schema}workflow_stream_item
where run_id = %(run_id)s
group by stream_key
order by stream_key

-- name: test_clock_state
-- The test harness's look at the store (simpleworkflow.testing): how many attempts run,
-- how many runs are due now, and the earliest instant after now at which a run or a
-- schedule comes due (a run that waits with no wake-up is due in year 9999: left out).
select (select count(*) from {schema}workflow_run where status = 'leased') as leased,
       (select count(*) from {schema}workflow_run
        where status = 'pending' and deleted_at is null and run_at <= now()) as due,
       (select min(run_at) from {schema}workflow_run
        where status = 'pending' and deleted_at is null and run_at > now()
          and run_at < '9999-01-01 00:00:00+00') as next_run,
       (select min(next_tick_at) from {schema}workflow_schedule
        where not paused and next_tick_at > now()) as next_tick
