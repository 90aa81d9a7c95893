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
