-- Statements the benchmark runs on SQLite, by name.

-- name: load_sleeping
-- Runs that sleep for a day, as a durable ctx.sleep leaves them.
with recursive n(i) as (select 1 union all select i + 1 from n where i < :count)
insert into workflow_run (type, payload, run_at, waiting_for, code_version)
select :type, '{}', strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 day'),
       json_object('kind', 'sleep', 'step', 'nap',
                   'until', strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '+1 day')),
       '1'
from n

-- name: analyze
analyze

-- name: last_event
select coalesce(max(id), 0) from workflow_event

-- name: successes
-- Counted from a fixed point every time, as on Postgres.
select count(*) from workflow_event where id > :after and event_type = 'succeeded'

-- name: first_claim
select (julianday(min(created_at)) - 2440587.5) * 86400.0 from workflow_event
where id > :after and event_type = 'leased'

-- name: nth_success
-- When the n-th run (0-based) finished, by the database clock.
select (julianday(created_at) - 2440587.5) * 86400.0 from workflow_event
where id > :after and event_type = 'succeeded'
order by created_at, id
limit 1 offset :n

-- name: waiting
select count(*) from workflow_run
where type = :type and status = 'pending' and waiting_for is not null

-- name: batches
-- Claim and completion transactions among the events after a cursor (one timestamp each,
-- to the millisecond, so two transactions within one millisecond count once).
select count(distinct created_at) filter (where event_type = 'leased'),
       count(distinct created_at) filter (where event_type = 'succeeded')
from workflow_event
where id > :after

-- name: finish_runs_events
-- The sweep benchmark's history, in three statements: the leased and succeeded events
-- and two journal steps a real run leaves, then the runs succeeded :days days ago.
insert into workflow_event (workflow_id, event_type, data)
select r.id, e.kind, '{"worker_id": "bench"}'
from workflow_run r cross join (select 'leased' as kind union all select 'succeeded') as e
where r.type = :type and r.status = 'pending'

-- name: finish_runs_steps
insert into workflow_step (run_id, step_name, position, output)
select r.id, s.name, s.position, '{"ok": true}'
from workflow_run r
cross join (select 'charge' as name, 0 as position union all select 'notify', 1) as s
where r.type = :type and r.status = 'pending'

-- name: finish_runs
update workflow_run
set status = 'succeeded', result = '{}', attempt = 0,
    updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || :days || ' days')
where type = :type and status = 'pending'
