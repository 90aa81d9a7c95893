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
insert into workflow_run (type, payload, idempotency_key, priority, run_at, max_attempts)
values (
    :type, :payload, :idempotency_key, :priority,
    coalesce(:run_at, strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :delay || ' seconds')),
    coalesce(:max_attempts, 3)
)
on conflict (idempotency_key) do nothing
returning *

-- name: created_event
insert into workflow_event (workflow_id, event_type, data)
values (:id, 'created', json_object('type', :type, 'priority', :priority, 'run_at', :run_at))

-- name: get_run_by_key
select * from workflow_run where idempotency_key = :idempotency_key

-- name: get_run
select * from workflow_run where id = :id

-- name: list_runs
select * from workflow_run
where (:type_like is null or type like :type_like escape '\')
  and (:statuses is null or status in (select value from json_each(:statuses)))
  and (:created_after is null or created_at >= :created_after)
  and (:created_before is null or created_at < :created_before)
  and (:include_deleted or deleted_at is null)
  and (:after_created_at is null or (created_at, id) < (:after_created_at, :after_id))
order by created_at desc, id desc
limit :limit

-- name: cancel_run
update workflow_run
set status = 'cancelled', updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where id = :id and status in ('pending', 'leased')
returning id

-- name: cancelled_event
insert into workflow_event (workflow_id, event_type, data) values (:id, 'cancelled', :data)

-- name: delete_run
update workflow_run
set deleted_at = strftime('%Y-%m-%d %H:%M:%f', 'now'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where id = :id and deleted_at is null
returning id

-- name: list_events
select * from workflow_event where workflow_id = :id order by id

-- Worker statements. Every write for a leased run is fenced: it matches only while the
-- run still carries the lease token the worker was given when it claimed the run.
-- Batches arrive as one JSON array of objects (:items), read with json_each.

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

-- name: claim
update workflow_run
set status = 'leased',
    leased_by = :worker_id,
    lease_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease || ' seconds'),
    lease_token = lower(hex(randomblob(16))),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where id in (
    select r.id
    from workflow_run r
    where r.status = 'pending'
      and r.run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
      and r.deleted_at is null
      and r.type in (select value from json_each(:types))
      and not exists (
          select 1 from workflow_registry g
          where g.workflow_name = r.type and (g.runtime <> :runtime or not g.is_enabled)
      )
    order by r.priority, r.run_at
    limit :limit
)
returning *

-- name: claim_events
insert into workflow_event (workflow_id, event_type, data)
select r.id, e.event_type,
       json_object('worker_id', r.leased_by, 'attempt', r.attempt + 1,
                   'lease_until', r.lease_until)
from json_each(:ids) as i
join workflow_run r on r.id = i.value
cross join (select 1 as n, 'leased' as event_type union all select 2, 'started') as e
order by i.key, e.n

-- name: heartbeat
update workflow_run
set lease_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || :lease || ' seconds'),
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where status = 'leased'
  and exists (
      select 1 from json_each(:items) as l
      where json_extract(l.value, '$.id') = workflow_run.id
        and json_extract(l.value, '$.token') = workflow_run.lease_token
  )
returning id

-- name: heartbeat_events
insert into workflow_event (workflow_id, event_type, data)
select value, 'heartbeat', json_object('extended_by_seconds', :lease, 'worker_id', :worker_id)
from json_each(:ids)

-- name: lease_states
select json_extract(l.value, '$.id') as id, r.status,
       r.lease_token = json_extract(l.value, '$.token') as held
from json_each(:items) as l
left join workflow_run r on r.id = json_extract(l.value, '$.id')

-- name: succeed_runs
update workflow_run
set status = 'succeeded',
    result = (select json_extract(o.value, '$.result') from json_each(:items) as o
              where json_extract(o.value, '$.id') = workflow_run.id),
    lease_until = null,
    lease_token = null,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where status = 'leased'
  and exists (
      select 1 from json_each(:items) as o
      where json_extract(o.value, '$.id') = workflow_run.id
        and json_extract(o.value, '$.token') = workflow_run.lease_token
  )
returning id

-- name: succeed_events
insert into workflow_event (workflow_id, event_type, data)
select r.id, 'succeeded', json_object('worker_id', r.leased_by, 'attempt', r.attempt + 1)
from json_each(:ids) as i join workflow_run r on r.id = i.value

-- name: fail_runs
update workflow_run
set status = case when o.final then 'failed' else 'pending' end,
    attempt = workflow_run.attempt + 1,
    run_at = case when o.final then workflow_run.run_at
                  else strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || o.delay || ' seconds') end,
    last_error = o.error,
    leased_by = case when o.final then workflow_run.leased_by end,
    lease_until = null,
    lease_token = null,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
from (
    select json_extract(value, '$.id') as id, json_extract(value, '$.token') as token,
           json_extract(value, '$.final') as final, json_extract(value, '$.delay') as delay,
           json_extract(value, '$.error') as error
    from json_each(:items)
) as o
where workflow_run.id = o.id
  and workflow_run.lease_token is o.token
  and workflow_run.status = 'leased'
returning workflow_run.id

-- name: fail_events
insert into workflow_event (workflow_id, event_type, data)
select r.id, case when r.status = 'failed' then 'failed' else 'retried' end,
       json_patch(json_extract(o.value, '$.data'),
                  json_object('attempt', r.attempt,
                              'retry_at', case when r.status = 'pending' then r.run_at end))
from json_each(:items) as o
join workflow_run r on r.id = json_extract(o.value, '$.id')
where r.id in (select value from json_each(:ids))

-- name: release_runs
update workflow_run
set status = 'pending', leased_by = null, lease_until = null, lease_token = null,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')
where status = 'leased'
  and exists (
      select 1 from json_each(:items) as o
      where json_extract(o.value, '$.id') = workflow_run.id
        and json_extract(o.value, '$.token') = workflow_run.lease_token
  )
returning id

-- name: release_events
insert into workflow_event (workflow_id, event_type, data)
select value, 'released', json_object('worker_id', :worker_id, 'reason', :reason)
from json_each(:ids)

-- name: expired_leases
select id, type, attempt, max_attempts, leased_by, lease_token
from workflow_run
where status = 'leased'
  and lease_until < strftime('%Y-%m-%d %H:%M:%f', 'now')
  and type in (select value from json_each(:types))
order by lease_until
limit :limit
