-- simpleworkflow 0017: a run's retention is fixed when it is created, as Postgres's 0022
-- (see there). Runs created before keep the old rule, their type's retention as it is
-- when the sweep runs: retention_fixed is 0 on those without one of their own.
alter table workflow_run add column retention_fixed integer not null default 1;
update workflow_run set retention_fixed = 0 where retention is null;

-- The type's retention, fixed on runs written without one by plain SQL; the library's
-- own inserts looked it up already, so for them the condition is false.
create trigger workflow_run_retention_fixed
after insert on workflow_run
when new.retention is null and new.retention_fixed
     and (select g.retention from workflow_registry g where g.workflow_name = new.type
          and typeof(g.retention) in ('integer', 'real')) is not null
begin
    update workflow_run
    set retention = (select g.retention from workflow_registry g
                     where g.workflow_name = new.type)
    where id = new.id;
end;

-- The sweep's candidates without a retention: those created before this migration by
-- type, the others by finishing time alone (the default).
drop index idx_workflow_run_expiry_by_type;

create index idx_workflow_run_expiry_by_type
    on workflow_run (type, updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null and not retention_fixed;

create index idx_workflow_run_expiry_default
    on workflow_run (updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null and retention_fixed;
