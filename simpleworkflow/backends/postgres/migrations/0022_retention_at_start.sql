-- simpleworkflow 0022: a run's retention is fixed when it is created. A run started
-- without one of its own takes its type's retention of that moment into
-- workflow_run.retention, whoever writes it, so that changing the type's retention later
-- neither deletes its earlier runs sooner nor keeps them longer. A run left without one
-- (its type had none) is kept the sweeper's default.
--
-- retention_fixed says it was done: false on the runs created before this migration,
-- which keep the old rule (their type's retention as it is when the sweep runs), true
-- on every run after. The library's inserts look the type's retention up themselves and
-- write true; a row inserted without it (plain SQL from another runtime) comes with null
-- (the column has no default), and the trigger below fixes its retention and writes
-- true. The trigger's WHEN clause is false for the library's inserts: they call no
-- function for it. Adding the column with a default and then dropping the default
-- rewrites nothing; not null holds, since a before trigger runs ahead of the check.
alter table {schema}workflow_run add column retention_fixed boolean not null default false;
alter table {schema}workflow_run alter column retention_fixed drop default;

create function {schema}workflow_run_fix_retention() returns trigger
language plpgsql as $$
begin
    if new.retention is null then
        new.retention := (select g.retention from {schema_name}.workflow_registry g
                          where g.workflow_name = new.type);
    end if;
    new.retention_fixed := true;
    return new;
end
$$;

create trigger workflow_run_fix_retention
    before insert on {schema}workflow_run
    for each row
    when (new.retention_fixed is null)
    execute function {schema}workflow_run_fix_retention();

-- The sweep's candidates without a retention: those created before this migration by
-- type (they follow their type's retention as it is now), the others by finishing time
-- alone (the default). Each range a sweep reads still holds only expired runs.
drop index {schema}idx_workflow_run_expiry_by_type;

create index idx_workflow_run_expiry_by_type
    on {schema}workflow_run (type, updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null and not retention_fixed;

create index idx_workflow_run_expiry_default
    on {schema}workflow_run (updated_at)
    where status in ('succeeded', 'failed', 'cancelled')
      and retention is null and parent_id is null and retention_fixed;
