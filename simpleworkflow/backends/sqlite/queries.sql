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
