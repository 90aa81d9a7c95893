package simpleworkflow

// Every statement this runtime sends, each copied verbatim from docs/schema.md
// ("A runtime in another language"); a test of the Python suite
// (tests/processes/test_go_runtime.py) fails when one of them is missing there.
// Table names are unqualified: the connections set search_path to the schema.

// sqlCreate records a run; no row when its idempotency key is taken.
const sqlCreate = `insert into workflow_run (type, payload, idempotency_key, priority, run_at, max_attempts)
values ($1, $2::jsonb, $3, $4, coalesce($5::timestamptz, now()), $6)
on conflict (idempotency_key) do nothing
returning id`

// sqlRunByKey finds the run that holds an idempotency key.
const sqlRunByKey = `select id from workflow_run where idempotency_key = $1`

// sqlGet reads a run.
const sqlGet = `select id, type, payload, status, priority, run_at, idempotency_key, attempt,
       max_attempts, leased_by, lease_until, last_error, result, created_at, updated_at
from workflow_run where id = $1`

// sqlCancel cancels a run and its unfinished descendants, with their events.
const sqlCancel = `with recursive tree (id) as (
    select $1::uuid
    union all
    select r.id from workflow_run r join tree t on r.parent_id = t.id
), cancelled as (
    update workflow_run
    set status = 'cancelled', updated_at = now(),
        logged_changes = logged_changes + 1
    where id in (select id from tree) and status in ('pending', 'leased')
    returning *, lease_token is not null as leased
), cancelled_events as (
    insert into workflow_event (workflow_id, event_type, data)
    select id, 'cancelled',
           case when id = $1::uuid then $2::jsonb
                else jsonb_build_object('reason', 'parent cancelled', 'parent_id', parent_id) end
    from cancelled
), woken_parents as (
    update workflow_run p
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
select id from cancelled`

// sqlRegister records the runtime of each type that has none yet.
const sqlRegister = `insert into workflow_registry (workflow_name, runtime)
select name, $2 from unnest($1::text[]) as t(name)
on conflict (workflow_name) do nothing`

// sqlOwners says which of the types another runtime owns, or is paused.
const sqlOwners = `select workflow_name, runtime, is_enabled from workflow_registry
where workflow_name = any($1::text[])`

// sqlClaim leases due runs of the types this runtime owns, at most $3; a suspect
// alone, and only when $4 (the worker holds nothing). Types with flow-control
// limits are left to the Python worker, which counts their leases. past_deadline says,
// by the database's clock, that the run's deadline has passed.
const sqlClaim = `with suspect as (
    select r.id, r.waiting_for
    from workflow_run r
    where r.status = 'pending'
      and r.isolate
      and r.run_at <= now()
      and r.deleted_at is null
      and r.type = any($1::text[])
      and r.code_version is null
      and r.type not in (
          select g.workflow_name from workflow_registry g
          where g.runtime <> $5 or not g.is_enabled or g.concurrency is not null
             or g.key_concurrency is not null or g.rate_limit is not null
      )
    order by r.priority, r.run_at
    limit 1
    for update skip locked
), ordinary as (
    select r.id, r.waiting_for
    from workflow_run r
    where r.status = 'pending'
      and r.run_at <= now()
      and r.deleted_at is null
      and not r.isolate
      and not exists (select from suspect)
      and r.type = any($1::text[])
      and r.code_version is null
      and r.type not in (
          select g.workflow_name from workflow_registry g
          where g.runtime <> $5 or not g.is_enabled or g.concurrency is not null
             or g.key_concurrency is not null or g.rate_limit is not null
      )
    order by r.priority, r.run_at
    limit $3
    for update skip locked
), candidates as (
    select * from suspect where $4::boolean
    union all
    select * from ordinary
), claimed as (
    update workflow_run r
    set status = 'leased',
        logged_changes = logged_changes + 1,
        leased_by = $2,
        lease_until = now() + make_interval(secs => $6::float8),
        lease_token = gen_random_uuid(),
        lease_returned = false,
        waiting_for = null,
        updated_at = now()
    from candidates c
    where r.id = any(array(select id from candidates)) and r.id = c.id
    returning r.id, r.type, r.payload, r.attempt, r.max_attempts, r.lease_token, r.isolate,
              r.leased_by, r.lease_until, r.deadline, r.deadline <= now() as past_deadline,
              case when c.waiting_for ->> 'kind' = 'throttle' and not c.waiting_for ? 'step'
                   then c.waiting_for -> 'resumes' else c.waiting_for end as was_waiting_for
), claim_events as (
    insert into workflow_event (workflow_id, event_type, data)
    select c.id, e.event_type,
           case when e.event_type = 'resumed' then c.was_waiting_for
                else jsonb_build_object('worker_id', c.leased_by, 'attempt', c.attempt + 1,
                                        'lease_until', c.lease_until) end
    from claimed c
    cross join (values (1, 'leased'), (2, 'started'), (3, 'resumed')) as e(n, event_type)
    where e.event_type <> 'resumed' or c.was_waiting_for is not null
    order by c.id, e.n
)
select id, type, payload, attempt, max_attempts, lease_token, isolate, deadline, past_deadline
from claimed`

// sqlHeartbeat extends held leases, fenced by their tokens; not one within $2
// seconds of its end (the worker has given it up by then).
const sqlHeartbeat = `with leases as (
    select * from jsonb_to_recordset($1::jsonb) as l(id uuid, token uuid)
), extended as (
    update workflow_run r
    set lease_until = now() + make_interval(secs => $3::float8), updated_at = now()
    from leases l
    where r.id = l.id and r.lease_token = l.token and r.status = 'leased'
      and r.lease_until > now() + make_interval(secs => $2::float8)
    returning r.id
), heartbeat_events as (
    insert into workflow_event (workflow_id, event_type, data)
    select id, 'heartbeat',
           jsonb_build_object('extended_by_seconds', $3::float8, 'worker_id', $4::text)
    from extended
)
select id from extended`

// sqlLeaseStates tells a lease held from one cancelled or taken over.
const sqlLeaseStates = `select l.id, r.status, r.lease_token = l.token and r.lease_until > now() as held
from jsonb_to_recordset($1::jsonb) as l(id uuid, token uuid)
left join workflow_run r on r.id = l.id`

// sqlSucceed ends held runs as succeeded, fenced by their tokens.
const sqlSucceed = `with outcomes as (
    select * from jsonb_to_recordset($1::jsonb) as o(id uuid, token uuid, result text)
), done as (
    update workflow_run r
    set status = 'succeeded', result = o.result::jsonb, lease_until = null,
        logged_changes = logged_changes + 1,
        lease_token = null, updated_at = now(),
        lease_returned = not exists (select from workflow_concurrency_returned t
                                     where t.workflow_name = r.type)
    from outcomes o
    where r.id = o.id and r.lease_token = o.token and r.status = 'leased'
    returning r.id, r.leased_by, r.attempt, r.parent_id
), done_events as (
    insert into workflow_event (workflow_id, event_type, data)
    select id, 'succeeded', jsonb_build_object('worker_id', leased_by, 'attempt', attempt + 1)
    from done
), woken_parents as (
    update workflow_run p
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
select id from done`

// sqlFail ends attempts of held runs (or of expired leases) as failures: a retry
// after delay seconds, or, when final, the run failed for good.
const sqlFail = `with outcomes as (
    select * from jsonb_to_recordset($1::jsonb)
        as o(id uuid, token uuid, final boolean, delay float8, error text, data jsonb,
             charged boolean, suspect boolean, crashes integer, keep_place boolean)
), done as (
    update workflow_run r
    set status = case when o.final then 'failed' else 'pending' end,
        logged_changes = logged_changes + 1,
        attempt = r.attempt + case when o.charged then 1 else 0 end,
        isolate = o.suspect,
        crashes = coalesce(o.crashes, 0),
        run_at = case when o.final then r.run_at
                      when o.keep_place then r.run_at - interval '1 millisecond'
                      else now() + make_interval(secs => o.delay) end,
        last_error = o.error,
        leased_by = case when o.final then r.leased_by end,
        lease_until = null,
        lease_token = null,
        lease_returned = not exists (select from workflow_concurrency_returned t
                                     where t.workflow_name = r.type),
        updated_at = now()
    from outcomes o
    where r.id = o.id and r.lease_token is not distinct from o.token and r.status = 'leased'
    returning r.id, r.status, r.attempt, r.run_at, r.parent_id
), woken_parents as (
    update workflow_run p
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
    insert into workflow_event (workflow_id, event_type, data)
    select d.id, case when d.status = 'failed' then 'failed' else 'retried' end,
           o.data || jsonb_build_object('attempt', d.attempt,
                                        'retry_at', case when d.status = 'pending' then d.run_at end)
    from done d join outcomes o on o.id = d.id
)
select id from done`

// sqlRelease gives held runs back, pending in their place, at a graceful stop.
const sqlRelease = `with outcomes as (
    select * from jsonb_to_recordset($1::jsonb) as o(id uuid, token uuid)
), done as (
    update workflow_run r
    set status = 'pending', leased_by = null, lease_until = null, lease_token = null,
        logged_changes = logged_changes + 1,
        lease_returned = not exists (select from workflow_concurrency_returned t
                                     where t.workflow_name = r.type),
        updated_at = now()
    from outcomes o
    where r.id = o.id and r.lease_token = o.token and r.status = 'leased'
    returning r.id
), release_events as (
    insert into workflow_event (workflow_id, event_type, data)
    select id, 'released', jsonb_build_object('worker_id', $2::text, 'reason', $3::text)
    from done
)
select id from done`

// sqlExpiredLeases locks expired leases of the types this runtime owns, for the
// reaper to record in the same transaction.
const sqlExpiredLeases = `select id, attempt, max_attempts, leased_by, lease_token, isolate, crashes
from workflow_run
where status = 'leased' and lease_until < now() and type = any($1::text[])
  and not exists (
      select 1 from workflow_registry g
      where g.workflow_name = type and g.runtime <> $2
  )
order by lease_until
limit $3
for update skip locked`

// sqlWorkerSeen records the worker in workflow_worker (live until seen_until), at its
// start ($9 true) and at every heartbeat interval, as the Python worker does.
const sqlWorkerSeen = `insert into workflow_worker as w
    (worker_id, host, pid, runtime, type_prefixes, concurrency, version, seen_until)
values ($1, $2, $3, $4, $5::jsonb, $6, $7, now() + make_interval(secs => $8::float8))
on conflict (worker_id) do update
set host = excluded.host, pid = excluded.pid, runtime = excluded.runtime,
    type_prefixes = excluded.type_prefixes, concurrency = excluded.concurrency,
    version = excluded.version,
    started_at = case when $9::boolean or w.stopped_at is not null
                      then now() else w.started_at end,
    last_seen_at = now(), seen_until = excluded.seen_until, stopped_at = null`

// sqlWorkerStopped says the worker stopped rather than died.
const sqlWorkerStopped = `update workflow_worker
set stopped_at = now(), last_seen_at = now(), seen_until = now()
where worker_id = $1 and pid = $2 and stopped_at is null`
