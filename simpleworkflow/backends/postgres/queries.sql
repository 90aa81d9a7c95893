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
with inserted as (
    insert into {schema}workflow_run
        (type, payload, idempotency_key, priority, run_at, max_attempts)
    values (
        %(type)s, %(payload)s::jsonb, %(idempotency_key)s, %(priority)s,
        coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s)),
        coalesce(%(max_attempts)s, 3)
    )
    on conflict (idempotency_key) do nothing
    returning *
), created_event as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'created', jsonb_build_object('type', type, 'priority', priority, 'run_at', run_at)
    from inserted
)
select * from inserted

-- name: get_run_by_key
select * from {schema}workflow_run where idempotency_key = %(idempotency_key)s

-- name: get_run
select * from {schema}workflow_run where id = %(id)s

-- name: list_runs
select * from {schema}workflow_run
where (%(type_like)s::text is null or type like %(type_like)s)
  and (%(statuses)s::text[] is null or status = any(%(statuses)s::text[]))
  and (%(created_after)s::timestamptz is null or created_at >= %(created_after)s)
  and (%(created_before)s::timestamptz is null or created_at < %(created_before)s)
  and (%(include_deleted)s or deleted_at is null)
  and (%(after_created_at)s::timestamptz is null
       or (created_at, id) < (%(after_created_at)s::timestamptz, %(after_id)s::uuid))
order by created_at desc, id desc
limit %(limit)s

-- name: cancel_run
with cancelled as (
    update {schema}workflow_run
    set status = 'cancelled', updated_at = now()
    where id = %(id)s and status in ('pending', 'leased')
    returning id
), cancelled_event as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'cancelled', %(data)s::jsonb from cancelled
)
select id from cancelled

-- name: delete_run
update {schema}workflow_run
set deleted_at = now(), updated_at = now()
where id = %(id)s and deleted_at is null
returning id

-- name: list_events
select * from {schema}workflow_event where workflow_id = %(id)s order by id

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

-- name: claim
with candidates as (
    select r.id
    from {schema}workflow_run r
    where r.status = 'pending'
      and r.run_at <= now()
      and r.deleted_at is null
      and r.type = any(%(types)s::text[])
      and not exists (
          select 1 from {schema}workflow_registry g
          where g.workflow_name = r.type and (g.runtime <> %(runtime)s or not g.is_enabled)
      )
    order by r.priority, r.run_at
    limit %(limit)s
    for update skip locked
), claimed as (
    update {schema}workflow_run r
    set status = 'leased',
        leased_by = %(worker_id)s,
        lease_until = now() + make_interval(secs => %(lease)s),
        lease_token = gen_random_uuid(),
        updated_at = now()
    from candidates c
    where r.id = c.id
    returning r.*
), claim_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select c.id, e.event_type,
           jsonb_build_object('worker_id', c.leased_by, 'attempt', c.attempt + 1,
                              'lease_until', c.lease_until)
    from claimed c cross join (values (1, 'leased'), (2, 'started')) as e(n, event_type)
    order by c.id, e.n
)
select * from claimed

-- name: heartbeat
with leases as (
    select * from jsonb_to_recordset(%(items)s::jsonb) as l(id uuid, token uuid)
), extended as (
    update {schema}workflow_run r
    set lease_until = now() + make_interval(secs => %(lease)s), updated_at = now()
    from leases l
    where r.id = l.id and r.lease_token = l.token and r.status = 'leased'
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
select l.id, r.status, r.lease_token = l.token as held
from jsonb_to_recordset(%(items)s::jsonb) as l(id uuid, token uuid)
left join {schema}workflow_run r on r.id = l.id

-- name: succeed_runs
with outcomes as (
    select * from jsonb_to_recordset(%(items)s::jsonb) as o(id uuid, token uuid, result text)
), done as (
    update {schema}workflow_run r
    set status = 'succeeded', result = o.result::jsonb, lease_until = null,
        lease_token = null, updated_at = now()
    from outcomes o
    where r.id = o.id and r.lease_token = o.token and r.status = 'leased'
    returning r.id, r.leased_by, r.attempt
), done_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'succeeded', jsonb_build_object('worker_id', leased_by, 'attempt', attempt + 1)
    from done
)
select id from done

-- name: fail_runs
with outcomes as (
    select * from jsonb_to_recordset(%(items)s::jsonb)
        as o(id uuid, token uuid, final boolean, delay float8, error text, data jsonb)
), done as (
    update {schema}workflow_run r
    set status = case when o.final then 'failed' else 'pending' end,
        attempt = r.attempt + 1,
        run_at = case when o.final then r.run_at
                      else now() + make_interval(secs => o.delay) end,
        last_error = o.error,
        leased_by = case when o.final then r.leased_by end,
        lease_until = null,
        lease_token = null,
        updated_at = now()
    from outcomes o
    where r.id = o.id and r.lease_token is not distinct from o.token and r.status = 'leased'
    returning r.id, r.status, r.attempt, r.run_at
), fail_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select d.id, case when d.status = 'failed' then 'failed' else 'retried' end,
           o.data || jsonb_build_object('attempt', d.attempt,
                                        'retry_at', case when d.status = 'pending' then d.run_at end)
    from done d join outcomes o on o.id = d.id
)
select id from done

-- name: release_runs
with outcomes as (
    select * from jsonb_to_recordset(%(items)s::jsonb) as o(id uuid, token uuid)
), done as (
    update {schema}workflow_run r
    set status = 'pending', leased_by = null, lease_until = null, lease_token = null,
        updated_at = now()
    from outcomes o
    where r.id = o.id and r.lease_token = o.token and r.status = 'leased'
    returning r.id
), release_events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select id, 'released', jsonb_build_object('worker_id', %(worker_id)s::text, 'reason', %(reason)s::text)
    from done
)
select id from done

-- name: expired_leases
select id, type, attempt, max_attempts, leased_by, lease_token
from {schema}workflow_run
where status = 'leased' and lease_until < now() and type = any(%(types)s::text[])
order by lease_until
limit %(limit)s
for update skip locked
