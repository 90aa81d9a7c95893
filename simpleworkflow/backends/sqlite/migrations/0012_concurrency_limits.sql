-- simpleworkflow 0012: concurrency limits, as Postgres's 0015 (docs/flow-control.md). A
-- type may have at most workflow_registry.concurrency runs leased at once, and at most
-- key_concurrency leased runs per concurrency key (a start option: a customer id, say).
alter table workflow_run add column concurrency_key text;
alter table workflow_registry add column concurrency integer
    constraint workflow_registry_concurrency_check check (concurrency >= 1);
alter table workflow_registry add column key_concurrency integer
    constraint workflow_registry_key_concurrency_check check (key_concurrency >= 1);

-- One counter per limited type (concurrency_key '') and per key of a type limited per
-- key: how many of its runs are leased (held), and how many may be (capacity). Writers
-- are serialised, so the claim reads them as they are; the triggers below count every
-- lease that starts or ends, whatever statement (in whatever language) wrote it.
create table workflow_concurrency (
    workflow_name   text not null,
    concurrency_key text not null,
    held            integer not null default 0,
    capacity        integer not null default 1,
    primary key (workflow_name, concurrency_key)
);

-- The claim steps over full types and keys through this small index.
create index idx_workflow_concurrency_full
    on workflow_concurrency (workflow_name, concurrency_key)
    where held >= capacity;

create trigger workflow_run_lease_taken
after update of status on workflow_run
when new.status = 'leased' and old.status <> 'leased'
begin
    insert into workflow_concurrency (workflow_name, concurrency_key, held, capacity)
    select g.workflow_name, '', 1, g.concurrency
    from workflow_registry g
    where g.workflow_name = new.type and g.concurrency is not null
    union all
    select g.workflow_name, new.concurrency_key, 1, g.key_concurrency
    from workflow_registry g
    where g.workflow_name = new.type and g.key_concurrency is not null
      and new.concurrency_key is not null
    on conflict (workflow_name, concurrency_key)
    do update set held = held + 1, capacity = excluded.capacity;
end;

create trigger workflow_run_lease_ended
after update of status on workflow_run
when old.status = 'leased' and new.status <> 'leased'
begin
    update workflow_concurrency set held = max(held - 1, 0)
    where workflow_name = old.type
      and concurrency_key in ('', coalesce(old.concurrency_key, ''));
end;

create trigger workflow_run_leased_deleted
after delete on workflow_run
when old.status = 'leased'
begin
    update workflow_concurrency set held = max(held - 1, 0)
    where workflow_name = old.type
      and concurrency_key in ('', coalesce(old.concurrency_key, ''));
end;
