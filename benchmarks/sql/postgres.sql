-- Statements the benchmark runs on Postgres, by name. {schema} is the quoted schema.

-- name: create_schema
create schema {schema_name}

-- name: drop_schema
drop schema if exists {schema_name} cascade

-- name: load_sleeping
-- Runs that sleep for a day, as a durable ctx.sleep leaves them.
insert into {schema}workflow_run (type, payload, run_at, waiting_for, code_version)
select %(type)s, '{}'::jsonb, now() + interval '1 day',
       jsonb_build_object('kind', 'sleep', 'step', 'nap',
                          'until', now() + interval '1 day'),
       '1'
from generate_series(1, %(count)s)

-- name: analyze
analyze {schema}workflow_run

-- name: last_event
select coalesce(max(id), 0) from {schema}workflow_event

-- name: successes
-- Counted from a fixed point every time: a cursor that moved on to the newest id would
-- skip events of transactions that took their ids earlier but committed later.
select count(*) from {schema}workflow_event
where id > %(after)s and event_type = 'succeeded'

-- name: first_claim
select extract(epoch from min(created_at))::float8 from {schema}workflow_event
where id > %(after)s and event_type = 'leased'

-- name: nth_success
-- When the n-th run (0-based) finished, by the database clock.
select extract(epoch from created_at)::float8 from {schema}workflow_event
where id > %(after)s and event_type = 'succeeded'
order by created_at, id
offset %(n)s limit 1

-- name: waiting
select count(*) from {schema}workflow_run
where type = %(type)s and status = 'pending' and waiting_for is not null

-- name: batches
-- Claim and completion transactions among the events after a cursor (one timestamp each).
select count(distinct created_at) filter (where event_type = 'leased'),
       count(distinct created_at) filter (where event_type = 'succeeded')
from {schema}workflow_event
where id > %(after)s

-- name: server_pids
-- Every process of the server (backends and background workers), to read their CPU time.
select pid from pg_stat_activity

-- name: finish_runs
-- The sweep benchmark's history: every pending run of the type succeeded %(days)s days
-- ago, with the leased and succeeded events and two journal steps a real run leaves.
with finished as (
    update {schema}workflow_run
    set status = 'succeeded', result = '{}'::jsonb, attempt = 0,
        updated_at = now() - make_interval(days => %(days)s)
    where type = %(type)s and status = 'pending'
    returning id
), events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select f.id, e.kind, '{"worker_id": "bench"}'::jsonb
    from finished f cross join (values ('leased'), ('succeeded')) as e(kind)
)
insert into {schema}workflow_step (run_id, step_name, position, output)
select f.id, s.name, s.position, '{"ok": true}'::jsonb
from finished f cross join (values ('charge', 0), ('notify', 1)) as s(name, position)

-- name: count_leases_off
-- The limits benchmark's baseline: no trigger counts leases (what a run cost before 0013).
alter table {schema}workflow_run disable trigger workflow_run_count_leases

-- name: count_leases_on
alter table {schema}workflow_run enable trigger workflow_run_count_leases

-- name: listen_ref_create
-- The hand-written queue of the idle pick-up's reference (benchmarks/listen_loop.py).
create table {schema}listen_ref (
    id bigserial primary key,
    status text not null default 'queued',
    payload jsonb not null,
    claimed_at timestamptz
);
create index listen_ref_queued on {schema}listen_ref (id) where status = 'queued'

-- name: listen_ref_listen
listen {schema_name}

-- name: listen_ref_insert
-- A producer's insert and its NOTIFY, one statement and one commit.
with made as (
    insert into {schema}listen_ref (payload) values (%(payload)s) returning id
)
select pg_notify(%(channel)s, id::text) from made

-- name: listen_ref_claim
-- The least a queue must do on a wake-up: lease the oldest queued row.
update {schema}listen_ref set status = 'running', claimed_at = now()
where id = (
    select id from {schema}listen_ref where status = 'queued'
    order by id limit 1 for update skip locked
)
returning id, payload

-- name: same_work_insert
-- The idle pick-up's same-work reference (benchmarks/listen_loop.py --same-work): seed
-- 000's producer insert, plain SQL; the project's insert trigger writes the created event
-- and sends the wake-up, as for any insert that is not the library's.
insert into {schema}workflow_run (type, payload, idempotency_key)
values (%(type)s, %(payload)s, %(idempotency_key)s)
on conflict (idempotency_key) do nothing
returning id

-- name: same_work_claim
-- Seed 000's claim in one statement: the oldest due pending run of the types, locked
-- with skip locked, leased (with the lease token every later write of the run is fenced
-- by, and logged_changes bumped since the statement writes its own events), and its
-- leased and started events, as the worker's claim writes them.
with next as (
    select id from {schema}workflow_run
    where status = 'pending'
      and type = any(%(types)s::text[])
      and run_at <= now()
      and deleted_at is null
    order by priority, run_at
    limit 1
    for update skip locked
), claimed as (
    update {schema}workflow_run r
    set status = 'leased',
        logged_changes = r.logged_changes + 1,
        leased_by = %(worker_id)s,
        lease_until = now() + make_interval(secs => %(lease)s),
        lease_token = gen_random_uuid(),
        updated_at = now()
    from next
    where r.id = next.id
    returning r.id, r.payload, r.attempt, r.leased_by, r.lease_until
), events as (
    insert into {schema}workflow_event (workflow_id, event_type, data)
    select c.id, e.event_type,
           jsonb_build_object('worker_id', c.leased_by, 'attempt', c.attempt + 1,
                              'lease_until', c.lease_until)
    from claimed c cross join (values (1, 'leased'), (2, 'started')) as e(n, event_type)
    order by e.n
)
select id, payload from claimed

-- name: load_payloads
-- The payload filter's backlog: runs numbered first .. first + count - 1, of 10,000
-- customers in two regions (one run in ten in "eu"), a fifth of them pending, the rest
-- finished, created one second apart, the last one now.
insert into {schema}workflow_run (type, payload, status, created_at)
select %(type)s,
       jsonb_build_object('customer', 'c_' || (g %% 10000), 'order', g,
                          'region', case when g %% 10 = 0 then 'eu' else 'us' end,
                          'lines', jsonb_build_array(jsonb_build_object('sku', 's' || (g %% 500),
                                                                        'qty', g %% 7))),
       case when g %% 5 = 0 then 'pending' else 'succeeded' end,
       now() - make_interval(secs => %(total)s - g)
from generate_series(%(first)s::bigint, %(first)s::bigint + %(count)s - 1) g

-- name: relation_sizes
select pg_relation_size('{schema}workflow_run'),
       pg_relation_size('{schema}idx_workflow_run_payload')

-- name: autovacuum_off
-- The payload index benchmark counts the merge of the index's pending list itself.
alter table {schema}workflow_run set (autovacuum_enabled = false)

-- name: vacuum_analyze
-- What autovacuum leaves a table at rest with: statistics, and a GIN index's pending
-- list merged into the index (which a search otherwise reads through, up to 4 MB).
vacuum (analyze) {schema}workflow_run
