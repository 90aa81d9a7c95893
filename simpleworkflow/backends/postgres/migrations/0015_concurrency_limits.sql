-- simpleworkflow 0015: concurrency limits (docs/flow-control.md). A type may have at
-- most workflow_registry.concurrency runs leased at once across the fleet, and at most
-- key_concurrency leased runs per concurrency key (a start option: a customer id, say).
alter table {schema}workflow_run add column concurrency_key text;
alter table {schema}workflow_registry
    add column concurrency integer
        constraint workflow_registry_concurrency_check check (concurrency >= 1),
    add column key_concurrency integer
        constraint workflow_registry_key_concurrency_check check (key_concurrency >= 1);

-- One counter per limited type (concurrency_key '') and per key of a type limited per
-- key: how many of its runs are leased (held), and how many may be (capacity, the limit).
-- A counter exists for every key of a limited type that has pending or leased runs: the
-- insert trigger below creates it, and so does setting a limit. The claim locks its
-- candidates' counters in key order and reads them at their newest version (select ...
-- for update), so no two claims can both take the last slot; the update trigger below
-- counts every lease that starts or ends.
create table {schema}workflow_concurrency (
    workflow_name   text not null,
    concurrency_key text not null,
    held            integer not null default 0,
    capacity        integer not null default 1,
    primary key (workflow_name, concurrency_key)
);

-- The claim steps over full types and keys by a hashed look-up of this small index: it
-- holds no more rows than runs are leased.
create index idx_workflow_concurrency_full
    on {schema}workflow_concurrency (workflow_name, concurrency_key)
    where held >= capacity;

-- Counters for the keys of new runs of a limited type, whoever inserts them.
create function {schema}workflow_run_count_keys() returns trigger
language plpgsql as $$
begin
    insert into {schema_name}.workflow_concurrency (workflow_name, concurrency_key, capacity)
    select distinct g.workflow_name, k.concurrency_key, k.capacity
    from (select distinct type, concurrency_key from new_runs) as n
    join {schema_name}.workflow_registry g on g.workflow_name = n.type
    cross join lateral (values ('', g.concurrency), (n.concurrency_key, g.key_concurrency))
        as k(concurrency_key, capacity)
    where k.concurrency_key is not null and k.capacity is not null
    order by 1, 2
    on conflict do nothing;
    return null;
end
$$;

create trigger workflow_run_count_keys
    after insert on {schema}workflow_run
    referencing new table as new_runs
    for each statement execute function {schema}workflow_run_count_keys();

-- The claim counts the leases it takes (it holds the counters locked, and adds to each
-- once). Every path that ends a lease (success, failure, retry, suspension, release,
-- cancellation, the reaper; deleting a leased run) is counted here, whoever wrote it in
-- whatever language. Only those rows call the function; for a type without a limit it
-- is an index probe that finds no counter. (A statement trigger, counting each counter
-- once per statement from transition tables, cost every update of workflow_run the copy
-- of its rows: a third of the drain rate of types without limits.)
create function {schema}workflow_run_count_leases() returns trigger
language plpgsql as $$
begin
    update {schema_name}.workflow_concurrency
    set held = greatest(held - 1, 0)
    where workflow_name = old.type
      and concurrency_key in ('', coalesce(old.concurrency_key, ''));
    return null;
end
$$;

create trigger workflow_run_count_leases
    after update of status on {schema}workflow_run
    for each row
    when (old.status = 'leased' and new.status <> 'leased')
    execute function {schema}workflow_run_count_leases();

create trigger workflow_run_count_deleted_leases
    after delete on {schema}workflow_run
    for each row
    when (old.status = 'leased')
    execute function {schema}workflow_run_count_leases();
