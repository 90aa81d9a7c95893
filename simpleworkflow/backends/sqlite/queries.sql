-- Every statement the SQLite backend runs, by name. Times are UTC text (see 0001).

-- name: schema_version_table
create table if not exists workflow_schema_version (
    version    integer primary key,
    name       text not null,
    applied_at text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now'))
)

-- name: schema_exists
select count(*) > 0 as present from sqlite_master where type = 'table' and name = :table

-- name: applied_versions
select version from workflow_schema_version order by version

-- name: record_version
insert into workflow_schema_version (version, name) values (:version, :name)

-- name: create_run
-- The created event is written by the insert trigger (migration 0003). Only what the
-- store decides is sent back, the times (updated_at is created_at); the client knows the
-- rest of the row. The client picks the id (time-ordered, see names.new_run_id); plain
-- SQL inserts get the column default.
insert into workflow_run
    (id, type, payload, idempotency_key, priority, run_at, max_attempts, parent_id, deadline,
     trace_context, retention, concurrency_key)
values (
    :id, :type, :payload, :idempotency_key, :priority,
    coalesce(:run_at, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay || ' seconds')),
    coalesce(:max_attempts, 3),
    :parent_id,
    coalesce(:deadline, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :deadline_in || ' seconds')),
    :trace_context,
    coalesce(:retention,
             (select g.retention from workflow_registry g where g.workflow_name = :type
                and typeof(g.retention) in ('integer', 'real'))),
    :concurrency_key
)
on conflict (idempotency_key) do nothing
returning created_at, run_at, deadline, retention

-- name: create_runs
-- Many runs in one statement; ids come from the client so rows can be matched to items.
-- A row per run, its id as "ids" (Postgres sends one row per group of runs, ids joined).
insert into workflow_run
    (id, type, payload, idempotency_key, priority, run_at, max_attempts, parent_id, deadline,
     trace_context, retention, concurrency_key)
select json_extract(i.value, '$.id'), json_extract(i.value, '$.type'),
       json_extract(i.value, '$.payload'), json_extract(i.value, '$.idempotency_key'),
       json_extract(i.value, '$.priority'),
       coalesce(strftime('%Y-%m-%d %H:%M:%f', json_extract(i.value, '$.run_at')),
                strftime('%Y-%m-%d %H:%M:%f', 'now',
                         '+' || json_extract(i.value, '$.delay') || ' seconds')),
       coalesce(json_extract(i.value, '$.max_attempts'), 3),
       json_extract(i.value, '$.parent_id'),
       coalesce(strftime('%Y-%m-%d %H:%M:%f', json_extract(i.value, '$.deadline')),
                strftime('%Y-%m-%d %H:%M:%f', 'now',
                         '+' || json_extract(i.value, '$.deadline_in') || ' seconds')),
       json_extract(i.value, '$.trace_context'),
       coalesce(json_extract(i.value, '$.retention'),
                (select g.retention from workflow_registry g
                 where g.workflow_name = json_extract(i.value, '$.type')
                   and typeof(g.retention) in ('integer', 'real'))),
       json_extract(i.value, '$.concurrency_key')
from json_each(:items) as i
where true
order by i.key
on conflict (idempotency_key) do nothing
returning id as ids, created_at, run_at, deadline, retention

-- name: debounce_run
-- A debounced start, as on Postgres (see there): insert the run, or update the pending,
-- unclaimed run of this type and key in place.
insert into workflow_run as r
    (id, type, payload, priority, run_at, max_attempts, deadline, trace_context, retention,
     debounce_key, concurrency_key)
values (
    :id, :type, :payload, :priority,
    strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :debounce_window || ' seconds'),
    coalesce(:max_attempts, 3),
    coalesce(:deadline, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :deadline_in || ' seconds')),
    :trace_context,
    coalesce(:retention,
             (select g.retention from workflow_registry g where g.workflow_name = :type
                and typeof(g.retention) in ('integer', 'real'))),
    :debounce_key,
    :concurrency_key
)
-- the concurrency key stays the first call's, as on Postgres
on conflict (type, debounce_key)
    where status = 'pending' and deleted_at is null and debounce_key is not null
do update set
    payload = excluded.payload,
    priority = excluded.priority,
    -- min() of a null is null: no max_wait, no cap
    run_at = min(excluded.run_at,
                 coalesce(strftime('%Y-%m-%d %H:%M:%f', r.created_at,
                                   '+' || :debounce_max_wait || ' seconds'),
                          excluded.run_at)),
    max_attempts = excluded.max_attempts,
    deadline = excluded.deadline,
    trace_context = excluded.trace_context,
    retention = excluded.retention,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
returning id, run_at, deadline, created_at, updated_at, retention

-- name: debounce_run_then_events
-- A call absorbed into the pending run (:id is that run's).
insert into workflow_event (workflow_id, event_type, data)
select id, 'debounced',
       json_object('key', :debounce_key,
                   'run_at', replace(run_at, ' ', 'T') || '+00:00',
                   'priority', :priority)
from workflow_run where id = :id

-- name: get_runs_by_keys
-- After ANALYZE, SQLite's statistics count every keyless run as one repeated key and
-- judge the index useless: it would read the whole table. Start from the keys, and look
-- each one up in the index.
select r.* from json_each(:keys) as k
cross join workflow_run as r indexed by idx_workflow_run_idempotency
where r.idempotency_key = k.value

-- name: get_run_by_key
select * from workflow_run where idempotency_key = :idempotency_key

-- name: get_run
select * from workflow_run where id = :id

-- name: list_runs
-- The states asked for are alternatives: a stored status, a pending run suspended in a
-- wait of one of these kinds (alone, or as one of the waits of kind "any"), or a pending
-- run due again after a failed attempt.
select * from workflow_run
where (:type_like is null or type like :type_like escape '\')
  and (not :filtered
       or status in (select value from json_each(:statuses))
       or (status = 'pending' and waiting_for is not null
           and (json_extract(waiting_for, '$.kind') in (select value from json_each(:waits))
                or exists (select 1 from json_each(waiting_for, '$.waits') as w
                           where json_extract(w.value, '$.kind')
                                 in (select value from json_each(:waits)))))
       or (:retrying and status = 'pending' and waiting_for is null and attempt > 0))
  and (:created_after is null or created_at >= :created_after)
  and (:created_before is null or created_at < :created_before)
  and (:include_deleted or deleted_at is null)
  and (:after_created_at is null
       or (created_at, rowid) < (:after_created_at,
                                 (select rowid from workflow_run where id = :after_id)))
-- Times here have millisecond precision: insertion order (rowid) breaks ties, so a run
-- started after a page was read never shows up on the pages after it.
order by created_at desc, rowid desc
limit :limit

-- name: list_runs_containing
-- list_runs with payload_contains given (Postgres serves it from an index; here the
-- matcher reads each run the listing reaches). Otherwise the same statement.
select * from workflow_run
where (:type_like is null or type like :type_like escape '\')
  and (not :filtered
       or status in (select value from json_each(:statuses))
       or (status = 'pending' and waiting_for is not null
           and (json_extract(waiting_for, '$.kind') in (select value from json_each(:waits))
                or exists (select 1 from json_each(waiting_for, '$.waits') as w
                           where json_extract(w.value, '$.kind')
                                 in (select value from json_each(:waits)))))
       or (:retrying and status = 'pending' and waiting_for is null and attempt > 0))
  and (:created_after is null or created_at >= :created_after)
  and (:created_before is null or created_at < :created_before)
  -- jsonb @> as Postgres decides it: see backends/sqlite/matching.py.
  and json_contains(payload, :payload_contains)
  and (:include_deleted or deleted_at is null)
  and (:after_created_at is null
       or (created_at, rowid) < (:after_created_at,
                                 (select rowid from workflow_run where id = :after_id)))
-- Times here have millisecond precision: insertion order (rowid) breaks ties, so a run
-- started after a page was read never shows up on the pages after it.
order by created_at desc, rowid desc
limit :limit

-- name: cancel_run
-- Cancels the run and every unfinished descendant; returns the rows that were cancelled,
-- as the cancel left them.
update workflow_run
-- waiting_for is kept: what a suspended run was waiting for, and the sign that an
-- attempt was under way (Run.attempts_made counts it)
set status = 'cancelled', updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    logged_changes = logged_changes + 1
where status in ('pending', 'leased')
  and id in (
      with recursive tree (id) as (
          select :id
          union all
          select r.id from workflow_run r join tree t on r.parent_id = t.id
      )
      select id from tree
  )
-- A run released by its worker has no lease token: one that has was leased.
returning *, lease_token is not null as leased

-- name: cancel_run_then_1_events
-- A descendant's event names the parent it was cancelled through, as on Postgres.
insert into workflow_event (workflow_id, event_type, data)
select i.value, 'cancelled',
       case when i.value = :id then json(:data)
            else json_object('reason', 'parent cancelled', 'parent_id', r.parent_id) end
from json_each(:ids) as i join workflow_run r on r.id = i.value
order by i.key

-- name: cancel_run_then_2_wake_parents
-- Through parent_id, as succeed_runs_then_2_wake_parents; a parent cancelled with its
-- children is no longer pending.
update workflow_run
set run_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
from (select c.id, c.parent_id from json_each(:ids) as i join workflow_run c on c.id = i.value)
    as d
where workflow_run.id = d.parent_id
  and workflow_run.status = 'pending'
  and exists (
      select 1
      from json_each(coalesce(workflow_run.waiting_for -> '$.waits',
                              json_array(json(workflow_run.waiting_for)))) as w
      where w.value ->> '$.child_id' = d.id
  )

-- name: delete_run
update workflow_run
set deleted_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where id = :id and deleted_at is null
returning id

-- name: delete_run_then_events
insert into workflow_event (workflow_id, event_type, data) values (:id, 'deleted', '{}')

-- name: list_events
select * from workflow_event where workflow_id = :id order by id

-- name: list_signals
select id, run_id, event, payload, created_at, consumed_at, step_name
from workflow_signal where run_id = :id order by id

-- Worker statements. Every write for a leased run is fenced: it matches only while the
-- run still carries the lease token the worker was given when it claimed the run.
-- Batches arrive as one JSON array (:items, :ids), read with json_each. A statement
-- named <name>_then_<n>_... runs after <name> in the same transaction, with the ids it
-- returned; SQLite cannot chain writes in one statement as Postgres does.

-- name: register_types
insert into workflow_registry (workflow_name, runtime)
select value, :runtime from json_each(:types)
where true
on conflict (workflow_name) do nothing

-- name: list_registry
select * from workflow_registry order by workflow_name

-- name: set_registry
insert into workflow_registry (workflow_name, runtime, description)
values (:name, :runtime, :description)
on conflict (workflow_name) do update
set runtime = excluded.runtime,
    description = coalesce(excluded.description, workflow_registry.description),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
returning *

-- name: enable_registry
update workflow_registry
set is_enabled = :enabled, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where workflow_name = :name
returning *

-- name: set_registry_retention
-- The retention of a type's runs started without one of their own (seconds); null: the
-- default.
update workflow_registry
set retention = :retention, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where workflow_name = :name
returning *

-- name: lock_registry
-- Writers are serialised (BEGIN IMMEDIATE): reading the rows is enough.
select workflow_name from workflow_registry
where workflow_name in (select value from json_each(:types))
order by workflow_name

-- name: set_registry_concurrency
-- At most concurrency leased runs of the type, and key_concurrency per concurrency key;
-- null: no limit. recount_concurrency follows, in the same transaction.
update workflow_registry
set concurrency = :concurrency, key_concurrency = :key_concurrency,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where workflow_name = :name
returning *

-- name: lock_leases
-- Writers are serialised (BEGIN IMMEDIATE): no claim or outcome can come in between.
select 1

-- name: clear_concurrency
delete from workflow_concurrency where workflow_name = :name

-- name: recount_concurrency
-- The counters of a type whose limits changed, from its leased runs (the keys with none
-- get theirs at their next claim).
insert into workflow_concurrency (workflow_name, concurrency_key, held, capacity)
select k.type, k.concurrency_key, count(*), min(k.capacity)
from (select r.type, '' as concurrency_key, g.concurrency as capacity
      from workflow_run r join workflow_registry g on g.workflow_name = r.type
      where r.type = :name and r.status = 'leased'
      union all
      select r.type, r.concurrency_key, g.key_concurrency
      from workflow_run r join workflow_registry g on g.workflow_name = r.type
      where r.type = :name and r.status = 'leased') as k
where k.concurrency_key is not null and k.capacity is not null
group by k.type, k.concurrency_key

-- name: set_rate_limit
insert into workflow_rate_limit (name, max_runs, period, per_key)
values (:name, :max_runs, :period, :per_key)
on conflict (name) do update
set max_runs = excluded.max_runs, period = excluded.period, per_key = excluded.per_key,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
returning *

-- name: get_rate_limit
select * from workflow_rate_limit where name = :name

-- name: list_rate_limits
select * from workflow_rate_limit order by name

-- name: delete_rate_limit
-- Types that named it obey no rate limit until it is set again.
delete from workflow_rate_limit where name = :name returning name

-- name: delete_rate_limit_then_windows
delete from workflow_rate_window where name = :name

-- name: set_registry_rate_limit
update workflow_registry
set rate_limit = :rate_limit, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where workflow_name = :name
returning *

-- name: claim
-- waiting_for is returned as it was (for replay) and cleared by claim_then_2. A suspect
-- (a run in a second crash beside others, see 0005, 0016) goes only to a worker that
-- holds no run (alone), and alone; while one is due, no worker claims ordinary runs, so
-- that busy workers drain until one is empty and takes it.
--
-- Concurrency limits (0012, docs/flow-control.md): the scan steps over full types and
-- keys; then only as many runs of each key and type are claimed as they have room for.
-- Writers are serialised, so the counters read here are current; the triggers count.
--
-- Rate limits (0013): of the runs left, those of a type that obeys a rate limit take a
-- token each from the limit's current window (claim_then_3 counts them); those it has
-- no token for are not leased but due again when the next window opens (returned
-- pending; claim_then_4 writes their throttled events).
with suspect as (
    -- Suspects are rare: without the hint SQLite may walk every due run in the claim
    -- index looking for one.
    select s.id, s.type, s.concurrency_key, s.priority, s.run_at
    from workflow_run s indexed by idx_workflow_run_suspects
    where s.status = 'pending'
      and s.isolate
      and s.run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
      and s.deleted_at is null
      -- the same filters as ordinary runs' below
      and s.type in (select value from json_each(:types))
      and (s.code_version is null
           or s.type || '@' || s.code_version in (select value from json_each(:known)))
      and not exists (
          select 1 from workflow_registry g
          where g.workflow_name = s.type and (g.runtime <> :runtime or not g.is_enabled)
      )
      and s.type not in (
          select f.workflow_name from workflow_concurrency f
          where f.concurrency_key = '' and f.held >= f.capacity
      )
      and not exists (
          select 1 from workflow_concurrency f
          where f.workflow_name = s.type and f.concurrency_key = s.concurrency_key
            and f.held >= f.capacity
      )
    order by s.priority, s.run_at
    limit 1
), ordinary as (
    select r.id, r.type, r.concurrency_key, r.priority, r.run_at
    from workflow_run r
    where r.status = 'pending'
      and r.run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
      and r.deleted_at is null
      and not r.isolate
      and not exists (select 1 from suspect)
      and r.type in (select value from json_each(:types))
      and (r.code_version is null
           or r.type || '@' || r.code_version in (select value from json_each(:known)))
      and not exists (
          select 1 from workflow_registry g
          where g.workflow_name = r.type and (g.runtime <> :runtime or not g.is_enabled)
      )
      and r.type not in (
          select f.workflow_name from workflow_concurrency f
          where f.concurrency_key = '' and f.held >= f.capacity
      )
      and not exists (
          select 1 from workflow_concurrency f
          where f.workflow_name = r.type and f.concurrency_key = r.concurrency_key
            and f.held >= f.capacity
      )
    order by r.priority, r.run_at
    limit :limit
), candidates as (
    select * from suspect where :alone
    union all
    select * from ordinary
), by_key as (
    -- within a key (and then a type) the claim takes runs in the usual order
    select cand.id, cand.type, cand.concurrency_key, cand.priority, cand.run_at,
           case when cand.concurrency_key is not null
                then g.key_concurrency - coalesce(k.held, 0) end as room,
           row_number() over (partition by cand.type, cand.concurrency_key
                              order by cand.priority, cand.run_at, cand.id) as n
    from candidates cand
    left join workflow_registry g on g.workflow_name = cand.type
    left join workflow_concurrency k
      on k.workflow_name = cand.type and k.concurrency_key = cand.concurrency_key
), by_type as (
    select b.id, b.type, b.concurrency_key, b.priority, b.run_at,
           row_number() over (partition by b.type order by b.priority, b.run_at, b.id) as n
    from by_key b
    where b.room is null or b.n <= b.room
), allowed as (
    select b.id, b.type, b.concurrency_key, b.priority, b.run_at
    from by_type b
    left join workflow_registry g on g.workflow_name = b.type
    left join workflow_concurrency t on t.workflow_name = b.type and t.concurrency_key = ''
    where g.concurrency is null or b.n <= g.concurrency - coalesce(t.held, 0)
), rated as (
    select a.id, l.period, a.priority, a.run_at, l.name, l.max_runs,
           case when l.per_key then coalesce(a.concurrency_key, '') else '' end as rate_key,
           cast((julianday('now') - 2440587.5) * 86400.0 / l.period as integer) * l.period
               as opens
    from allowed a
    join workflow_registry g on g.workflow_name = a.type
    -- a period written by hand that is no number cannot open windows: not applied
    join workflow_rate_limit l
      on l.name = g.rate_limit and typeof(l.period) in ('integer', 'real') and l.period > 0
), throttled as (
    select q.id, q.name,
           strftime('%Y-%m-%d %H:%M:%f', q.opens + q.period, 'unixepoch') as next_window
    from (
        select r.id, r.name, r.opens, r.period,
               case when w.window_start >= strftime('%Y-%m-%d %H:%M:%f', r.opens, 'unixepoch')
                    then r.max_runs - w.used else r.max_runs end as tokens,
               row_number() over (partition by r.name, r.rate_key
                                  order by r.priority, r.run_at, r.id) as n
        from rated r
        left join workflow_rate_window w on w.name = r.name and w.rate_key = r.rate_key
    ) as q
    where q.n > q.tokens
), outcome as (
    select a.id, t.name, t.next_window from allowed a left join throttled t on t.id = a.id
)
update workflow_run
set status = case when o.next_window is null then 'leased' else status end,
    logged_changes = logged_changes + 1,
    leased_by = case when o.next_window is null then :worker_id else leased_by end,
    lease_until = case when o.next_window is null
                       then strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease || ' seconds')
                       else lease_until end,
    lease_token = case when o.next_window is null then lower(hex(randomblob(16)))
                       else lease_token end,
    code_version = case when o.next_window is null
                        then coalesce(code_version,
                                      json_extract(:versions, '$."' || type || '"'))
                        else code_version end,
    run_at = coalesce(o.next_window, run_at),
    -- shown as throttled until claimed; the wait it resumes from (if any) kept under
    -- 'resumes' for the claim's resumed event
    waiting_for = case
        when o.next_window is null then waiting_for
        else json_patch(
            json_object('kind', 'throttle', 'rate_limit', o.name,
                        'until', replace(o.next_window, ' ', 'T') || '+00:00'),
            case when waiting_for is null then '{}'
                 when json_extract(waiting_for, '$.kind') = 'throttle'
                      and json_type(waiting_for, '$.step') is null
                 then json_object('resumes', json(json_extract(waiting_for, '$.resumes')))
                 else json_object('resumes', json(waiting_for)) end)
        end,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
from outcome as o
where workflow_run.id = o.id
returning *, strftime('%Y-%m-%d %H:%M:%f', 'now') as db_now

-- name: claim_then_1_events
-- Each event carries the claim's own instant (the run's updated_at, set by the claim), not
-- this later statement's: a rate limit's window is the claim's, and so is its events' time.
insert into workflow_event (workflow_id, event_type, data, created_at)
select r.id, e.event_type,
       case when e.event_type = 'resumed' then r.resumes
            else json_object('worker_id', r.leased_by, 'attempt', r.attempt + 1,
                             'lease_until', replace(r.lease_until, ' ', 'T') || '+00:00') end,
       r.updated_at
from json_each(:ids) as i
join (
    -- a run throttled at an earlier claim resumes what its wait keeps, if any
    select id, leased_by, attempt, lease_until, updated_at,
           case when json_extract(waiting_for, '$.kind') = 'throttle'
                     and json_type(waiting_for, '$.step') is null
                then json_extract(waiting_for, '$.resumes') else waiting_for end as resumes
    from workflow_run
) as r on r.id = i.value
cross join (select 1 as n, 'leased' as event_type
            union all select 2, 'started'
            union all select 3, 'resumed') as e
where e.event_type <> 'resumed' or r.resumes is not null
order by i.key, e.n

-- name: claim_then_2_clear_waits
update workflow_run set waiting_for = null
where waiting_for is not null and id in (select value from json_each(:ids))

-- name: claim_then_3_rate_windows
-- The tokens the claimed runs took from their rate limits' current windows.
insert into workflow_rate_window (name, rate_key, window_start, used, granted)
select l.name, case when l.per_key then coalesce(r.concurrency_key, '') else '' end,
       strftime('%Y-%m-%d %H:%M:%f',
                cast((julianday('now') - 2440587.5) * 86400.0 / l.period as integer) * l.period,
                'unixepoch'),
       count(*), count(*)
from json_each(:ids) as i
join workflow_run r on r.id = i.value
join workflow_registry g on g.workflow_name = r.type
join workflow_rate_limit l
  on l.name = g.rate_limit and typeof(l.period) in ('integer', 'real') and l.period > 0
where true
group by 1, 2, 3
on conflict (name, rate_key) do update
set used = case when window_start >= excluded.window_start then used + excluded.used
                else excluded.used end,
    granted = excluded.granted,
    window_start = max(window_start, excluded.window_start)

-- name: claim_then_4_throttled_events
insert into workflow_event (workflow_id, event_type, data)
select r.id, 'throttled',
       json_object('rate_limit', g.rate_limit, 'until', replace(r.run_at, ' ', 'T') || '+00:00')
from json_each(:throttled) as i
join workflow_run r on r.id = i.value
join workflow_registry g on g.workflow_name = r.type

-- name: unknown_versions
-- Reads only idx_workflow_run_versioned (0004): never-claimed runs have no code version.
-- Without statistics SQLite would rather read every due run in idx_workflow_run_due.
select type, code_version, count(*) as runs
from workflow_run indexed by idx_workflow_run_versioned
where status = 'pending' and run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
  and deleted_at is null
  and type in (select value from json_each(:types))
  and code_version is not null
  and type || '@' || code_version not in (select value from json_each(:known))
group by type, code_version

-- name: heartbeat
update workflow_run
set lease_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease || ' seconds'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
from (
    select json_extract(value, '$.id') as id, json_extract(value, '$.token') as token
    from json_each(:items)
) as l
where workflow_run.id = l.id
  and workflow_run.lease_token = l.token
  and workflow_run.status = 'leased'
  -- a heartbeat that reaches the store after the lease ran out, or within the worker's
  -- give-up margin of its end, extends it no more: its worker has given the run up by
  -- then (worker/leases.py), and the run must not wait for the extension
  and workflow_run.lease_until
      > strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :margin || ' seconds')
returning workflow_run.id

-- name: heartbeat_then_events
-- Whole seconds as an integer (3, not 3.0), as Postgres writes a float8 in jsonb.
insert into workflow_event (workflow_id, event_type, data)
select value, 'heartbeat',
       json_object('extended_by_seconds',
                   case when :lease = cast(:lease as integer) then cast(:lease as integer)
                        else :lease end,
                   'worker_id', :worker_id)
from json_each(:ids)
where :with_events

-- name: lease_states
select json_extract(l.value, '$.id') as id, r.status,
       r.lease_token = json_extract(l.value, '$.token')
           and r.lease_until > strftime('%Y-%m-%d %H:%M:%f', 'now') as held
from json_each(:items) as l
left join workflow_run r on r.id = json_extract(l.value, '$.id')

-- name: succeed_runs
-- Each outcome finds its run by primary key. (Matching every leased run against the whole
-- batch cost leased runs x outcomes JSON lookups: ~7 ms for 100 of 100.)
update workflow_run
set status = 'succeeded',
    logged_changes = logged_changes + 1,
    result = o.result,
    lease_until = null,
    lease_token = null,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
from (
    select json_extract(value, '$.id') as id, json_extract(value, '$.token') as token,
           json_extract(value, '$.result') as result
    from json_each(:items)
) as o
where workflow_run.id = o.id
  and workflow_run.lease_token = o.token
  and workflow_run.status = 'leased'
returning workflow_run.id

-- name: succeed_runs_then_1_events
insert into workflow_event (workflow_id, event_type, data)
select r.id, 'succeeded', json_object('worker_id', r.leased_by, 'attempt', r.attempt + 1)
from json_each(:ids) as i join workflow_run r on r.id = i.value

-- name: succeed_runs_then_2_wake_parents
-- A parent is found through its finished child's parent_id, by primary key, as on
-- Postgres: matching waiting_for alone would read every pending run.
update workflow_run
set run_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
from (select c.id, c.parent_id from json_each(:ids) as i join workflow_run c on c.id = i.value)
    as d
where workflow_run.id = d.parent_id
  and workflow_run.status = 'pending'
  and exists (
      select 1
      from json_each(coalesce(workflow_run.waiting_for -> '$.waits',
                              json_array(json(workflow_run.waiting_for)))) as w
      where w.value ->> '$.child_id' = d.id
  )

-- name: continue_runs
-- Continue-as-new (0020), as Postgres's: link the runs succeed_runs has just ended to
-- the runs that carry them on; the follow-ups insert those and write the events.
update workflow_run
set continued_as = json_extract(i.value, '$.next')
from json_each(:items) as i
where workflow_run.id = json_extract(i.value, '$.id')
  and workflow_run.status = 'succeeded' and workflow_run.continued_as is null
returning workflow_run.id

-- name: continue_runs_then_1_start
-- The new run keeps the old one's priority, max_attempts, parent, concurrency key and
-- retention; its trace context is the old run's start with the continuing attempt under
-- 'attempt'. The insert triggers write its created event.
insert into workflow_run
    (id, type, payload, priority, max_attempts, parent_id, trace_context, retention,
     concurrency_key, retention_fixed, continued_from)
select json_extract(i.value, '$.next'), r.type, json_extract(i.value, '$.payload'),
       r.priority, r.max_attempts, r.parent_id,
       case when json_type(i.value, '$.trace') is null or json_type(i.value, '$.trace') = 'null'
            then json_remove(r.trace_context, '$.attempt')
            else json_set(coalesce(r.trace_context, '{}'), '$.attempt',
                          json(json_extract(i.value, '$.trace'))) end,
       r.retention, r.concurrency_key, r.retention_fixed, r.id
from json_each(:items) as i
join workflow_run r on r.id = json_extract(i.value, '$.id')
where r.continued_as = json_extract(i.value, '$.next')

-- name: continue_runs_then_2_events
insert into workflow_event (workflow_id, event_type, data)
select r.id, 'continued_as_new', json_object('continued_as', r.continued_as)
from json_each(:items) as i
join workflow_run r on r.id = json_extract(i.value, '$.id')
where r.continued_as = json_extract(i.value, '$.next')

-- name: fail_runs
update workflow_run
set status = case when o.final then 'failed' else 'pending' end,
    logged_changes = logged_changes + 1,
    attempt = workflow_run.attempt + o.charged,
    isolate = o.suspect,
    crashes = coalesce(o.crashes, 0),
    -- a crash: due at once, in its place in the queue (a claim keeps run_at), just ahead
    -- of the runs due with it (a batch of runs shares one run_at)
    run_at = case when o.final then workflow_run.run_at
                  when o.keep_place
                  then strftime('%Y-%m-%d %H:%M:%f', workflow_run.run_at, '-0.001 seconds')
                  else strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || o.delay || ' seconds') end,
    last_error = o.error,
    leased_by = case when o.final then workflow_run.leased_by end,
    lease_until = null,
    lease_token = null,
    -- the attempt given back, for the next one to link to (none: forget the last)
    trace_context = case when o.trace is null
                         then json_remove(workflow_run.trace_context, '$.attempt')
                         else json_set(coalesce(workflow_run.trace_context, '{}'), '$.attempt',
                                       json(o.trace)) end,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
from (
    select json_extract(value, '$.id') as id, json_extract(value, '$.token') as token,
           json_extract(value, '$.final') as final, json_extract(value, '$.delay') as delay,
           json_extract(value, '$.error') as error, json_extract(value, '$.charged') as charged,
           json_extract(value, '$.suspect') as suspect, json_extract(value, '$.crashes') as crashes,
           json_extract(value, '$.keep_place') as keep_place, json_extract(value, '$.trace') as trace
    from json_each(:items)
) as o
where workflow_run.id = o.id
  and workflow_run.lease_token is o.token
  and workflow_run.status = 'leased'
returning workflow_run.id

-- name: fail_runs_then_1_events
insert into workflow_event (workflow_id, event_type, data)
select r.id, case when r.status = 'failed' then 'failed' else 'retried' end,
       json_patch(json_extract(o.value, '$.data'),
                  json_object('attempt', r.attempt,
                              'retry_at', case when r.status = 'pending'
                                               then replace(r.run_at, ' ', 'T') || '+00:00' end))
from json_each(:items) as o
join workflow_run r on r.id = json_extract(o.value, '$.id')
where r.id in (select value from json_each(:ids))

-- name: fail_runs_then_2_wake_parents
-- Through parent_id, as succeed_runs_then_2_wake_parents.
update workflow_run
set run_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
from (select c.id, c.parent_id from json_each(:ids) as i join workflow_run c on c.id = i.value
      where c.status = 'failed') as d
where workflow_run.id = d.parent_id
  and workflow_run.status = 'pending'
  and exists (
      select 1
      from json_each(coalesce(workflow_run.waiting_for -> '$.waits',
                              json_array(json(workflow_run.waiting_for)))) as w
      where w.value ->> '$.child_id' = d.id
  )

-- name: release_runs
-- A release keeps the run's suspect mark: giving a run back says nothing about it.
update workflow_run
set status = 'pending', leased_by = null, lease_until = null, lease_token = null,
    logged_changes = logged_changes + 1,
    -- given back now, a run keeps its place in the queue; later, it waits its turn
    run_at = case when o.delay > 0
                  then strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || o.delay || ' seconds')
                  else workflow_run.run_at end,
    -- the attempt given back, for the next one to link to (none: forget the last)
    trace_context = case when o.trace is null
                         then json_remove(workflow_run.trace_context, '$.attempt')
                         else json_set(coalesce(workflow_run.trace_context, '{}'), '$.attempt',
                                       json(o.trace)) end,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
from (
    select json_extract(value, '$.id') as id, json_extract(value, '$.token') as token,
           json_extract(value, '$.delay') as delay, json_extract(value, '$.trace') as trace
    from json_each(:items)
) as o
where workflow_run.id = o.id
  and workflow_run.lease_token = o.token
  and workflow_run.status = 'leased'
returning workflow_run.id

-- name: release_runs_then_events
insert into workflow_event (workflow_id, event_type, data)
select value, 'released', json_object('worker_id', :worker_id, 'reason', :reason)
from json_each(:ids)

-- name: expired_leases
select id, type, attempt, max_attempts, leased_by, lease_token, isolate, crashes
from workflow_run
where status = 'leased'
  and lease_until < strftime('%Y-%m-%d %H:%M:%f', 'now')
  and type in (select value from json_each(:types))
  -- a type another runtime owns is that runtime's to recover
  and not exists (
      select 1 from workflow_registry g
      where g.workflow_name = workflow_run.type and g.runtime <> :runtime
  )
order by lease_until
limit :limit

-- name: next_lease_expiry
-- Seconds until the first lease of these types runs out (negative: one has), for the
-- reaper to sleep until then: the first row of idx_workflow_run_lease_expiry that
-- matches, not a count of leases.
select (julianday(lease_until) - julianday('now')) * 86400.0 as seconds
from workflow_run
where status = 'leased'
  and type in (select value from json_each(:types))
  and not exists (
      select 1 from workflow_registry g
      where g.workflow_name = workflow_run.type and g.runtime <> :runtime
  )
order by lease_until
limit 1

-- Durable execution: the journal, suspension, signals, children.
--
-- waiting_for holds one wait ({"kind": "signal", "event": ...}, {"kind": "child",
-- "child_id": ...} ...) or, for a run waiting in parallel branches, {"kind": "any",
-- "waits": [one wait each]}. The statements that wake a run (here, and the wake_parents
-- follow-ups above) read both as one list with json_each(coalesce(waiting_for ->
-- '$.waits', json_array(json(waiting_for)))).

-- name: load_journal
select step_name, kind, position, status, output, attempts, started_at, completed_at
from workflow_step
where run_id = :run_id
order by position

-- name: record_step
insert into workflow_step
    (run_id, step_name, kind, position, status, output, attempts, started_at, completed_at)
select id, :name, :kind, :position, :status, :output, :attempts,
       coalesce(:started_at, strftime('%Y-%m-%d %H:%M:%f', 'now')),
       case when :status = 'completed' then strftime('%Y-%m-%d %H:%M:%f', 'now') end
from workflow_run
where id = :run_id and lease_token = :token and status = 'leased'
  and lease_until > strftime('%Y-%m-%d %H:%M:%f', 'now')
on conflict (run_id, step_name) do update
set status = excluded.status, output = excluded.output, attempts = excluded.attempts,
    completed_at = excluded.completed_at
where workflow_step.status = 'retrying'
returning run_id as id

-- name: trim_journal
-- Whether the lease holds, in the transaction whose follow-up deletes a run's journal
-- entries (a durable loop's old iterations): nothing is deleted when it was lost.
select 1 as held from workflow_run
where id = :run_id and lease_token = :token and status = 'leased'
  and lease_until > strftime('%Y-%m-%d %H:%M:%f', 'now')

-- name: trim_journal_then_delete
delete from workflow_step
where run_id = :run_id and step_name in (select value from json_each(:names))

-- name: record_step_then_events
insert into workflow_event (workflow_id, event_type, data, created_at)
select :run_id, json_extract(e.value, '$.type'), json(json_extract(e.value, '$.data')),
       coalesce(strftime('%Y-%m-%d %H:%M:%f', json_extract(e.value, '$.at')),
                strftime('%Y-%m-%d %H:%M:%f', 'now'))
from json_each(:events) as e
order by e.key

-- name: suspend_runs
update workflow_run
set status = 'pending',
    logged_changes = logged_changes + 1,
    run_at = min(coalesce(strftime('%Y-%m-%d %H:%M:%f', o.run_at),
                          strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || o.delay || ' seconds')),
                 coalesce(workflow_run.deadline, '9999-12-31')),
    waiting_for = o.waiting_for,
    leased_by = null, lease_until = null, lease_token = null,
    isolate = 0, crashes = 0,
    -- the attempt given back, for the next one to link to (none: forget the last)
    trace_context = case when o.trace is null
                         then json_remove(workflow_run.trace_context, '$.attempt')
                         else json_set(coalesce(workflow_run.trace_context, '{}'), '$.attempt',
                                       json(o.trace)) end,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
from (
    select json_extract(value, '$.id') as id, json_extract(value, '$.token') as token,
           json_extract(value, '$.run_at') as run_at, json_extract(value, '$.delay') as delay,
           json(json_extract(value, '$.waiting_for')) as waiting_for,
           json_extract(value, '$.trace') as trace
    from json_each(:items)
) as o
where workflow_run.id = o.id
  and workflow_run.lease_token = o.token
  and workflow_run.status = 'leased'
returning workflow_run.id

-- name: suspend_runs_then_events
-- One event per wait the run is suspended in, each with the run's due time.
insert into workflow_event (workflow_id, event_type, data)
select r.id, json_extract(e.value, '$.type'),
       json_patch(json_extract(e.value, '$.data'),
                  json_object('until', replace(r.run_at, ' ', 'T') || '+00:00'))
from json_each(:items) as o
join workflow_run r on r.id = json_extract(o.value, '$.id')
cross join json_each(o.value, '$.events') as e
where r.id in (select value from json_each(:ids))
order by o.key, e.key

-- name: wake_suspended
update workflow_run
set run_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where id in (select value from json_each(:ids))
  and status = 'pending'
  and run_at > strftime('%Y-%m-%d %H:%M:%f', 'now')
  and exists (
      select 1
      from json_each(coalesce(workflow_run.waiting_for -> '$.waits',
                              json_array(json(workflow_run.waiting_for)))) as w
      where exists (
                select 1 from workflow_signal s
                where s.run_id = workflow_run.id and s.consumed_at is null
                  and s.event = w.value ->> '$.event'
                  and (w.value -> '$.match' is null
                       or json_contains(s.payload, w.value -> '$.match'))
            )
         or exists (
                select 1 from workflow_run c
                where c.id = w.value ->> '$.child_id'
                  and c.status in ('succeeded', 'failed', 'cancelled')
            )
  )
returning id

-- name: lock_run
select id, status from workflow_run where id = :id

-- name: insert_signal
-- The time is written, not left to the column's default, so that a test's clock
-- (simpleworkflow.testing) dates the signal too: a race is won by the signal sent first.
insert into workflow_signal (run_id, event, payload, created_at)
values (:id, :event, :payload, strftime('%Y-%m-%d %H:%M:%f', 'now'))
returning id

-- name: insert_signal_then_events
insert into workflow_event (workflow_id, event_type, data)
select :id, 'signal_received', json_object('event', :event, 'signal_id', value)
from json_each(:ids)

-- name: wake_for_signal
-- Wakes the run if any of the waits it is suspended in takes this signal.
update workflow_run
set run_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where id = :id
  and status = 'pending'
  and run_at > strftime('%Y-%m-%d %H:%M:%f', 'now')
  and exists (
      select 1
      from json_each(coalesce(waiting_for -> '$.waits', json_array(json(waiting_for)))) as w
      where w.value ->> '$.event' = :event
        and (w.value -> '$.match' is null or json_contains(:payload, w.value -> '$.match'))
  )
returning id

-- name: consume_signal
update workflow_signal
set consumed_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), step_name = :name
where id = (
    select s.id from workflow_signal s
    where s.run_id = :run_id and s.event = :event and s.consumed_at is null
      and (:match is null or json_contains(s.payload, :match))
    order by s.id
    limit 1
)
  and exists (
      select 1 from workflow_run
      where id = :run_id and lease_token = :token and status = 'leased'
        and lease_until > strftime('%Y-%m-%d %H:%M:%f', 'now')
  )
returning id, payload, created_at

-- name: take_rate_token
-- A step's token of a rate limit (0013, docs/flow-control.md): taken from the same window
-- row as the claims of the types that obey the limit, only while the lease holds; no row
-- back for a limit that does not exist or a lease lost. Writers are serialised, so the
-- row read is current; record_step journals a granted token in the same transaction.
insert into workflow_rate_window as w (name, rate_key, window_start, used, granted)
select l.name, case when l.per_key then coalesce(:key, '') else '' end,
       strftime('%Y-%m-%d %H:%M:%f',
                cast((julianday('now') - 2440587.5) * 86400.0 / l.period as integer) * l.period,
                'unixepoch'),
       1, 1
from workflow_rate_limit l
where l.name = :limit
  and exists (
      select 1 from workflow_run
      where id = :run_id and lease_token = :token and status = 'leased'
        and lease_until > strftime('%Y-%m-%d %H:%M:%f', 'now')
  )
on conflict (name, rate_key) do update
set granted = case when w.window_start < excluded.window_start
                     or w.used < (select max_runs from workflow_rate_limit where name = :limit)
                   then 1 else 0 end,
    used = case when w.window_start < excluded.window_start then 1
                when w.used < (select max_runs from workflow_rate_limit where name = :limit)
                then w.used + 1
                else w.used end,
    window_start = max(w.window_start, excluded.window_start)
returning granted,
          strftime('%Y-%m-%d %H:%M:%f',
                   (julianday(window_start) - 2440587.5) * 86400.0
                   + (select period from workflow_rate_limit where name = :limit),
                   'unixepoch') as next_window

-- Operator statements: runs counted by state, how late each queue is, a retry, a purge.

-- name: count_runs
-- Runs by type and status; for a pending run also the kinds of wait it is suspended in
-- (all of them, comma-separated, for a run waiting in parallel branches), and 'retry' for
-- one due again after a failed attempt. Reads every run that is not deleted.
select type, status,
       case when status <> 'pending' then null
            when waiting_for is null then case when attempt > 0 then 'retry' end
            when json_type(waiting_for, '$.waits') = 'array'
                then (select group_concat(distinct json_extract(w.value, '$.kind'))
                      from json_each(waiting_for, '$.waits') as w)
            else json_extract(waiting_for, '$.kind') end as waits,
       count(*) as runs
from workflow_run
where deleted_at is null
group by 1, 2, 3

-- name: oldest_due
-- Seconds since the oldest due pending run of each type became due, read from
-- idx_workflow_run_due alone.
select type, (julianday('now') - julianday(min(run_at))) * 86400.0 as seconds
from workflow_run indexed by idx_workflow_run_due
where status = 'pending' and deleted_at is null
  and run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
group by type

-- name: live_runs
-- What is under way, for a metrics scrape, as on Postgres: pending runs by type from
-- idx_workflow_run_due alone, leased runs through idx_workflow_run_lease_expiry, and the
-- registry. The column past counts runs whose time has come: due (pending), or lease run
-- out (leased).
select 'pending' as kind, type, null as holder, count(*) as runs,
       sum(run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')) as past,
       (julianday('now') - julianday(min(run_at))) * 86400.0 as seconds, null as enabled
from workflow_run indexed by idx_workflow_run_due
where status = 'pending' and deleted_at is null
group by type
union all
select 'leased', type, leased_by, count(*),
       sum(lease_until < strftime('%Y-%m-%d %H:%M:%f', 'now')), null, null
from workflow_run indexed by idx_workflow_run_lease_expiry
where status = 'leased'
group by type, leased_by
union all
select 'registered', workflow_name, null, 0, 0, null, is_enabled
from workflow_registry

-- name: lock_run_row
-- The transaction holds the database's write lock already (BEGIN IMMEDIATE).
select * from workflow_run where id = :id

-- name: retry_run
-- A new attempt on a failed or cancelled run, checked by the caller: due now, with the
-- attempts it was given.
update workflow_run
set status = 'pending', run_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    logged_changes = logged_changes + 1,
    max_attempts = :max_attempts,
    leased_by = null, lease_until = null, lease_token = null, waiting_for = null,
    isolate = 0, crashes = 0, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where id = :id and status = :status
returning *

-- name: retry_run_then_1_events
-- The audit event keeps the error.
insert into workflow_event (workflow_id, event_type, data)
values (:id, 'retried_by_operator', json(:data))

-- name: retry_run_then_2_reopen_steps
-- Steps that used up their attempts run again; the rest of the journal replays.
update workflow_step
set output = null
where run_id = :id
  and status = 'retrying' and kind = 'step' and json_extract(output, '$.gave_up') is not null

-- name: fork_run
-- A fork (0023, admin.fork), as Postgres's: the new run, with the given payload or the
-- original's; the follow-up copies the journal. The insert trigger writes its created
-- event.
insert into workflow_run
    (id, type, payload, priority, max_attempts, concurrency_key, retention,
     retention_fixed, forked_from, forked_at_step)
select :new_id, o.type, coalesce(:payload, o.payload), o.priority, o.max_attempts,
       o.concurrency_key, o.retention, o.retention_fixed, o.id, :step
from workflow_run o
where o.id = :id
returning *

-- name: fork_run_then_1_journal
-- The original's entries before the fork point, copied in one statement; the fork
-- point's own scope ('<step>/...') and the rollback phase are left out.
insert into workflow_step
    (run_id, step_name, kind, position, status, output, attempts, started_at, completed_at)
select :new_id, s.step_name, s.kind, s.position, s.status, s.output, s.attempts,
       s.started_at, s.completed_at
from workflow_step s
where s.run_id = :id and s.position < :position
  and s.kind <> 'rollback' and substr(s.step_name, 1, 9) <> 'rollback/'
  and substr(s.step_name, 1, length(:step) + 1) <> :step || '/'

-- name: list_forks
-- The runs forked from a run, oldest first, through idx_workflow_run_forked_from.
select * from workflow_run
where forked_from = :id
order by created_at, id
limit :limit

-- name: purge_runs
-- Up to :limit finished runs (and soft-deleted ones no worker holds) unchanged for
-- :older_than seconds; their events, journal and signals go by cascade. A child whose
-- parent is under way stays: the parent may yet read its outcome.
delete from workflow_run
where id in (
    select r.id from workflow_run r
    where r.updated_at <= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :older_than || ' seconds')
      and (r.status in ('succeeded', 'failed', 'cancelled')
           or (r.deleted_at is not null and r.status <> 'leased'))
      and (:type is null or r.type = :type)
      and not exists (
          select 1 from workflow_run p
          where p.id = r.parent_id and p.status in ('pending', 'leased')
      )
    limit :limit
)
returning type

-- Retention (migration 0009): which runs are past it, and why none other is, as in the
-- Postgres file. Retentions are seconds; each cutoff is computed once per type (or per
-- retention of a run's own) and the runs before it read from the index by range.

-- name: sweep_runs
-- Up to :limit runs past their retention; their events, journal and signals go by
-- cascade. The transaction holds the database's write lock (BEGIN IMMEDIATE).
delete from workflow_run
where id in (
    with recursive kinds (type) as (
        select min(type) from workflow_run
        where status in ('succeeded', 'failed', 'cancelled')
          and retention is null and parent_id is null and not retention_fixed
        union all
        select (select min(r.type) from workflow_run r
                where r.status in ('succeeded', 'failed', 'cancelled')
                  and r.retention is null and r.parent_id is null and not r.retention_fixed
                  and r.type > k.type)
        from kinds k
        where k.type is not null
    ), spans (retention) as (
        select min(retention) from workflow_run
        where status in ('succeeded', 'failed', 'cancelled')
          and retention is not null and parent_id is null
        union all
        select (select min(r.retention) from workflow_run r
                where r.status in ('succeeded', 'failed', 'cancelled')
                  and r.retention is not null and r.parent_id is null
                  and r.retention > s.retention)
        from spans s
        where s.retention is not null
    ), cutoffs (type, retention, before) as (
        select k.type, null,
               strftime('%Y-%m-%d %H:%M:%f',
                        julianday('now') - min(coalesce(g.retention, :default), :ceiling) / 86400.0)
        from kinds k
        left join workflow_registry g on g.workflow_name = k.type
        where k.type is not null
        union all
        select null, s.retention,
               strftime('%Y-%m-%d %H:%M:%f', julianday('now') - min(s.retention, :ceiling) / 86400.0)
        from spans s
        where s.retention is not null
    )
    select r.id from cutoffs c
    join workflow_run r indexed by idx_workflow_run_expiry_by_type
        on r.type = c.type and r.updated_at <= c.before
    where r.status in ('succeeded', 'failed', 'cancelled')
      and r.retention is null and r.parent_id is null and not r.retention_fixed
    union all
    select r.id from cutoffs c
    join workflow_run r indexed by idx_workflow_run_expiry_own
        on r.retention = c.retention and r.updated_at <= c.before
    where r.status in ('succeeded', 'failed', 'cancelled')
      and r.retention is not null and r.parent_id is null
    union all
    select r.id from workflow_run r indexed by idx_workflow_run_expiry_default
    where r.status in ('succeeded', 'failed', 'cancelled')
      and r.retention is null and r.parent_id is null and r.retention_fixed
      and r.updated_at <= strftime('%Y-%m-%d %H:%M:%f',
                                   julianday('now') - min(:default, :ceiling) / 86400.0)
    limit :limit
)
returning type

-- name: count_expired
-- What sweep_runs would delete now, by type.
with recursive kinds (type) as (
    select min(type) from workflow_run
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null and not retention_fixed
    union all
    select (select min(r.type) from workflow_run r
            where r.status in ('succeeded', 'failed', 'cancelled')
              and r.retention is null and r.parent_id is null and not r.retention_fixed
                  and r.type > k.type)
    from kinds k
    where k.type is not null
), spans (retention) as (
    select min(retention) from workflow_run
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is not null and parent_id is null
    union all
    select (select min(r.retention) from workflow_run r
            where r.status in ('succeeded', 'failed', 'cancelled')
              and r.retention is not null and r.parent_id is null
              and r.retention > s.retention)
    from spans s
    where s.retention is not null
), cutoffs (type, retention, before) as (
    select k.type, null,
           strftime('%Y-%m-%d %H:%M:%f',
                    julianday('now') - min(coalesce(g.retention, :default), :ceiling) / 86400.0)
    from kinds k
    left join workflow_registry g on g.workflow_name = k.type
    where k.type is not null
    union all
    select null, s.retention,
           strftime('%Y-%m-%d %H:%M:%f', julianday('now') - min(s.retention, :ceiling) / 86400.0)
    from spans s
    where s.retention is not null
), expired (type) as (
    select r.type from cutoffs c
    join workflow_run r indexed by idx_workflow_run_expiry_by_type
        on r.type = c.type and r.updated_at <= c.before
    where r.status in ('succeeded', 'failed', 'cancelled')
      and r.retention is null and r.parent_id is null and not r.retention_fixed
    union all
    select r.type from cutoffs c
    join workflow_run r indexed by idx_workflow_run_expiry_own
        on r.retention = c.retention and r.updated_at <= c.before
    where r.status in ('succeeded', 'failed', 'cancelled')
      and r.retention is not null and r.parent_id is null
    union all
    select r.type from workflow_run r indexed by idx_workflow_run_expiry_default
    where r.status in ('succeeded', 'failed', 'cancelled')
      and r.retention is null and r.parent_id is null and r.retention_fixed
      and r.updated_at <= strftime('%Y-%m-%d %H:%M:%f',
                                   julianday('now') - min(:default, :ceiling) / 86400.0)
)
select type, count(*) as runs from expired group by type order by type

-- name: hold_service_lease
-- Take or renew the lease of a fleet-wide service: a row comes back while the caller
-- holds it (it held it already, or the last holder let it expire), none otherwise.
insert into workflow_service_lease (name, holder, lease_until)
values (:name, :holder,
        strftime('%Y-%m-%d %H:%M:%f', julianday('now') + :seconds / 86400.0))
on conflict (name) do update
set holder = excluded.holder, lease_until = excluded.lease_until,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where workflow_service_lease.holder = excluded.holder
   or workflow_service_lease.lease_until <= strftime('%Y-%m-%d %H:%M:%f', 'now')
returning holder

-- name: release_service_lease
delete from workflow_service_lease
where name = :name and holder = :holder
-- Topics (migration 0007): subscriptions of workflow types to topic patterns.

-- name: subscribe
-- Subscribing again keeps the subscription and takes the new start options.
insert into workflow_subscription (pattern, workflow_type, priority, max_attempts)
values (:pattern, :type, :priority, :max_attempts)
on conflict (pattern, workflow_type) do update
set priority = excluded.priority, max_attempts = excluded.max_attempts,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
returning *

-- name: unsubscribe
delete from workflow_subscription
where pattern = :pattern and workflow_type = :type
returning pattern

-- name: list_subscriptions
-- Every subscription, of one type or all, or those whose pattern matches a topic: the
-- topic is LIKE the pattern's topic_like and, unless the pattern ends in '#', has as many
-- segments (so that the wildcard standing for a '*' takes no '.'). The same test as the
-- publishing statement of docs/topics.md; the table is small and read whole.
select * from workflow_subscription
where (:type is null or workflow_type = :type)
  and (:topic is null
       or (:topic like topic_like escape '\'
           and (segments is null
                or segments = length(:topic) - length(replace(:topic, '.', '')) + 1)))
order by pattern, workflow_type

-- Schedules (migration 0011): cron schedules and the scheduler's reads and writes.

-- name: upsert_schedule
-- Creating again changes the definition and keeps the schedule's pause; the next tick is
-- planned again only when the cron expression or time zone changed (or none was).
insert into workflow_schedule
    (name, workflow_type, cron, timezone, payload, missed, priority, max_attempts,
     next_tick_at, in_code)
values (:name, :type, :cron, :timezone, :payload, :missed, :priority, :max_attempts,
        :next_tick_at, :in_code)
on conflict (name) do update
set workflow_type = excluded.workflow_type, cron = excluded.cron,
    timezone = excluded.timezone, payload = excluded.payload, missed = excluded.missed,
    priority = excluded.priority, max_attempts = excluded.max_attempts,
    in_code = excluded.in_code, error = null,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    next_tick_at = case when workflow_schedule.cron = excluded.cron
                             and workflow_schedule.timezone = excluded.timezone
                             and workflow_schedule.next_tick_at is not null
                        then workflow_schedule.next_tick_at else excluded.next_tick_at end
returning *

-- name: get_schedule
select * from workflow_schedule where name = :name

-- name: list_schedules
select * from workflow_schedule
where :type is null or workflow_type = :type
order by name

-- name: set_schedule_paused
-- Resuming plans the first tick after now: the ticks of the pause are not caught up.
update workflow_schedule
set paused = :paused, error = null, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    next_tick_at = case when paused and not :paused then :next_tick_at
                        else next_tick_at end
where name = :name
returning *

-- name: delete_schedule
delete from workflow_schedule where name = :name returning name

-- name: due_schedules
-- The scheduler's read, by the partial index: the schedules due by the database's clock
-- (or not planned yet), earliest first.
select * from workflow_schedule
where not paused
  and (next_tick_at <= strftime('%Y-%m-%d %H:%M:%f', 'now') or next_tick_at is null)
order by next_tick_at nulls first
limit :limit

-- name: next_schedule_tick
-- The database's clock, and the earliest tick after it: how long the scheduler may sleep.
select strftime('%Y-%m-%d %H:%M:%f', 'now') as db_now,
       (select min(next_tick_at) from workflow_schedule
        where not paused
          and next_tick_at > strftime('%Y-%m-%d %H:%M:%f', 'now')) as next_due

-- name: advance_schedule
-- Compare and set: only the scheduler that read this next tick moves it on; one that
-- raced it finds another value and starts nothing.
update workflow_schedule
set next_tick_at = :next_tick_at, last_tick_at = coalesce(:last_tick_at, last_tick_at),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where name = :name and not paused and next_tick_at is :old
returning name

-- name: break_schedule
-- A schedule the scheduler cannot read (written with plain SQL): paused, with the reason.
update workflow_schedule
set paused = 1, error = :error, updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where name = :name and next_tick_at is :old
returning name

-- The dashboard's reads: outcomes per minute, the workers seen through their leases, a
-- run's children.

-- name: outcomes_per_minute
-- As on Postgres: runs finished and attempts failed per minute over the last :minutes
-- minutes (the current one included) from idx_workflow_event_outcomes; the current
-- minute comes first, alone when nothing happened.
with clock as (select strftime('%Y-%m-%d %H:%M:00', 'now') as now_minute)
select c.now_minute, e.minute, e.event_type, e.events
from clock c
left join (
    select strftime('%Y-%m-%d %H:%M:00', created_at) as minute, event_type, count(*) as events
    from workflow_event indexed by idx_workflow_event_outcomes
    where event_type in ('succeeded', 'failed', 'retried')
      and created_at >= strftime('%Y-%m-%d %H:%M:00', 'now',
                                 printf('-%d minutes', :minutes - 1))
    group by 1, 2
) e on 1
order by e.minute

-- name: lease_holders
-- As on Postgres, through idx_workflow_run_lease_expiry.
select leased_by, type, count(*) as runs, min(lease_until) as next_expiry,
       max(updated_at) as last_renewed,
       sum(lease_until < strftime('%Y-%m-%d %H:%M:%f', 'now')) as expired
from workflow_run indexed by idx_workflow_run_lease_expiry
where status = 'leased' and leased_by is not null
group by leased_by, type
order by leased_by, type

-- name: list_children
-- A run's children, oldest first, through idx_workflow_run_parent.
select * from workflow_run
where parent_id = :id
order by created_at, id
limit :limit

-- Worker presence (migration 0015), as on Postgres.

-- name: worker_seen
insert into workflow_worker
    (worker_id, host, pid, runtime, type_prefixes, concurrency, version, seen_until)
values (:worker_id, :host, :pid, :runtime, :type_prefixes, :concurrency, :version,
        strftime('%Y-%m-%d %H:%M:%f', julianday('now') + :seconds / 86400.0))
on conflict (worker_id) do update
set host = excluded.host, pid = excluded.pid, runtime = excluded.runtime,
    type_prefixes = excluded.type_prefixes, concurrency = excluded.concurrency,
    version = excluded.version,
    started_at = case when :starting or workflow_worker.stopped_at is not null
                      then strftime('%Y-%m-%d %H:%M:%f', 'now')
                      else workflow_worker.started_at end,
    last_seen_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), seen_until = excluded.seen_until,
    stopped_at = null

-- name: worker_stopped
update workflow_worker
set stopped_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    last_seen_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    seen_until = strftime('%Y-%m-%d %H:%M:%f', 'now')
where worker_id = :worker_id and pid = :pid and stopped_at is null

-- name: list_workers
select *, strftime('%Y-%m-%d %H:%M:%f', 'now') as now,
       seen_until >= strftime('%Y-%m-%d %H:%M:%f', 'now') and stopped_at is null as live
from workflow_worker
where seen_until >= strftime('%Y-%m-%d %H:%M:%f', julianday('now') - :window / 86400.0)
order by worker_id

-- name: forget_workers
delete from workflow_worker
where seen_until < strftime('%Y-%m-%d %H:%M:%f', julianday('now') - :older_than / 86400.0)

-- name: fail_unparsable
-- Pending runs of these types whose JSON columns break the schema's own checks (written
-- with them off: pragma ignore_check_constraints). SQLite checks every column of a row it
-- updates, so no claim can lease such a run, and the claim that meets it fails whole.
-- Failed for good here, after such a claim failed, each such text kept as a JSON string
-- of itself (the only change the checks allow) and named in last_error.
update workflow_run
set status = 'failed',
    payload = case when json_valid(payload) then payload else json_quote(payload) end,
    result = case when result is null or json_valid(result) then result
                  else json_quote(result) end,
    waiting_for = case when waiting_for is null or json_valid(waiting_for) then waiting_for
                       else json_quote(waiting_for) end,
    trace_context = case when trace_context is null or json_valid(trace_context)
                         then trace_context else json_quote(trace_context) end,
    last_error = 'simpleworkflow.errors.UnreadableRow: run ' || id || ' cannot be read: '
                 || trim(case when json_valid(payload) then '' else 'payload ' end
                         || case when result is null or json_valid(result) then ''
                                 else 'result ' end
                         || case when waiting_for is null or json_valid(waiting_for) then ''
                                 else 'waiting_for ' end
                         || case when trace_context is null or json_valid(trace_context)
                                 then '' else 'trace_context ' end)
                 || ' not JSON (written with the schema''s checks off); each is kept as a '
                 || 'JSON string of its text. Correct it, then retry the run',
    logged_changes = logged_changes + 1,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where status = 'pending'
  and type in (select value from json_each(:types))
  and (not json_valid(payload)
       or (result is not null and not json_valid(result))
       or (waiting_for is not null and not json_valid(waiting_for))
       or (trace_context is not null and not json_valid(trace_context)))
returning id

-- name: fail_unparsable_events
-- The failed event of each run fail_unparsable failed.
insert into workflow_event (workflow_id, event_type, data)
select r.id, 'failed',
       json_object('worker_id', :worker_id, 'retryable', json('false'),
                   'error', json_object('type', 'simpleworkflow.errors.UnreadableRow',
                                        'message', substr(r.last_error, 38)))
from workflow_run r
where r.id in (select value from json_each(:ids))

-- name: end_session
insert into workflow_dashboard_logout (nonce, expires_at)
values (:nonce, :expires_at)
on conflict (nonce) do nothing

-- name: session_ended
select 1 as ended from workflow_dashboard_logout where nonce = :nonce

-- name: forget_ended_sessions
delete from workflow_dashboard_logout
where expires_at < strftime('%Y-%m-%d %H:%M:%f', julianday('now') - :grace / 86400.0)

-- Values a run publishes (0021, ctx.set_value).

-- name: set_value
-- A run's value, replacing its key's last one (version counts the sets). Run after the
-- set's journal entry, in its transaction (JournalOps.set_value): written only with it.
insert into workflow_value as v (run_id, key, value, step_name)
values (:run_id, :key, :value, :name)
on conflict (run_id, key) do update
set value = excluded.value, version = v.version + 1, step_name = excluded.step_name,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
returning version

-- name: list_values
select run_id, key, value, version, step_name, updated_at
from workflow_value where run_id = :id order by key

-- name: get_value
select run_id, key, value, version, step_name, updated_at
from workflow_value where run_id = :id and key = :key

-- name: await_value
-- A run's value :key and the run's status, of one moment: a reader waiting for the value
-- stops once the run has ended without it (a run sets no value after its end).
select r.status as run_status, r.id as run_id, v.key, v.value, v.version, v.step_name,
       v.updated_at
from workflow_run as r
left join workflow_value as v on v.run_id = r.id and v.key = :key
where r.id = :id

-- name: append_stream
-- Whether the lease holds, in the transaction whose follow-up appends to a run's stream.
select 1 as held from workflow_run
where id = :run_id and lease_token = :token and status = 'leased'
  and lease_until > strftime('%Y-%m-%d %H:%M:%f', 'now')

-- name: append_stream_then_insert
-- The items after the stream's last one, in the order of their seq; items already
-- written by the same origin and seq (a step run again after a crash) are left out.
-- Returns the offsets written (for the observers).
insert into workflow_stream_item (run_id, stream_key, position, origin, origin_seq, value, closed)
select :run_id, :key,
       coalesce((select max(position) + 1 from workflow_stream_item
                 where run_id = :run_id and stream_key = :key), 0)
         + row_number() over (order by json_extract(i.value, '$.seq')) - 1,
       :origin, json_extract(i.value, '$.seq'), json(json_extract(i.value, '$.value')),
       json_extract(i.value, '$.closed')
from json_each(:items) as i
where not exists (
    select 1 from workflow_stream_item s
    where s.run_id = :run_id and s.stream_key = :key and s.origin = :origin
      and s.origin_seq = json_extract(i.value, '$.seq'))
returning position

-- name: read_stream
-- A page of a stream's items after position :after, and whether the run has ended (one
-- read transaction: the status and the items are of the same moment).
select (select status from workflow_run where id = :run_id) as run_status,
       i.position, i.value, i.closed, i.created_at
from (select 1) as one
left join (
    select position, value, closed, created_at from workflow_stream_item
    where run_id = :run_id and stream_key = :key and position > :after
    order by position
    limit :limit
) as i on 1
order by i.position

-- name: list_streams
-- A run's streams: each key with its item count and whether it was closed.
select stream_key, sum(not closed) as items, max(closed) as closed,
       max(created_at) as updated_at
from workflow_stream_item
where run_id = :run_id
group by stream_key
order by stream_key

-- name: test_clock_state
-- The test harness's look at the store (simpleworkflow.testing): how many attempts run,
-- how many runs are due now, and the earliest instant after now at which a run or a
-- schedule comes due (a run that waits with no wake-up is due in year 9999: left out).
select (select count(*) from workflow_run where status = 'leased') as leased,
       (select count(*) from workflow_run
        where status = 'pending' and deleted_at is null
          and run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')) as due,
       (select min(run_at) from workflow_run
        where status = 'pending' and deleted_at is null
          and run_at > strftime('%Y-%m-%d %H:%M:%f', 'now')
          and run_at < '9999') as next_run,
       (select min(next_tick_at) from workflow_schedule
        where not paused and next_tick_at > strftime('%Y-%m-%d %H:%M:%f', 'now')) as next_tick
