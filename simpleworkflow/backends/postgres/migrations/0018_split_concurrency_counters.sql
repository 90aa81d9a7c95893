-- simpleworkflow 0018: concurrency counters split in two (docs/flow-control.md). Each
-- counter of 0015 was one row that every claim locked and every lease end updated, so a
-- worker's claims and completions took turns on it: a limit that did not bind still cost
-- a fifth of the drain. Now the claims add to one row (workflow_concurrency.taken) and
-- the lease ends to another (workflow_concurrency_returned.returned); held = taken -
-- returned. A claim locks its taken rows and reads returned without a lock, as its
-- snapshot saw it: a stale returned is too low, so the claim sees too many leases held
-- and at worst claims less than it could, never more. Lease ends wait only on each other.
alter table {schema}workflow_concurrency rename column held to taken;
-- returned as the last claim of this counter read it: what the full-counter index below
-- goes by (the claim rereads returned for the counters it finds there)
alter table {schema}workflow_concurrency add column returned_seen integer not null default 0;

create table {schema}workflow_concurrency_returned (
    workflow_name   text not null,
    concurrency_key text not null,
    returned        integer not null default 0,
    primary key (workflow_name, concurrency_key)
);
insert into {schema}workflow_concurrency_returned (workflow_name, concurrency_key)
select workflow_name, concurrency_key from {schema}workflow_concurrency;

-- The counters full when their last claim counted them: the claim rereads returned for
-- these few and steps over those still full. A counter freed since is looked at again.
drop index {schema}idx_workflow_concurrency_full;
create index idx_workflow_concurrency_full
    on {schema}workflow_concurrency (workflow_name, concurrency_key)
    where taken - returned_seen >= capacity;

create or replace function {schema}workflow_run_count_keys() returns trigger
language plpgsql as $$
begin
    with keys as (
        insert into {schema_name}.workflow_concurrency (workflow_name, concurrency_key, capacity)
        select distinct g.workflow_name, k.concurrency_key, k.capacity
        from (select distinct type, concurrency_key from new_runs) as n
        join {schema_name}.workflow_registry g on g.workflow_name = n.type
        cross join lateral (values ('', g.concurrency), (n.concurrency_key, g.key_concurrency))
            as k(concurrency_key, capacity)
        where k.concurrency_key is not null and k.capacity is not null
        order by 1, 2
        on conflict do nothing
        returning workflow_name, concurrency_key
    )
    insert into {schema_name}.workflow_concurrency_returned (workflow_name, concurrency_key)
    select workflow_name, concurrency_key from keys
    order by 1, 2
    on conflict do nothing;
    return null;
end
$$;

-- Every lease end adds to the returned row only: the claims never lock it.
create or replace function {schema}workflow_run_count_leases() returns trigger
language plpgsql as $$
begin
    update {schema_name}.workflow_concurrency_returned
    set returned = returned + 1
    where workflow_name = old.type
      and concurrency_key in ('', coalesce(old.concurrency_key, ''));
    return null;
end
$$;
