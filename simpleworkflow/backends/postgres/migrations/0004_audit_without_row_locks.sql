-- simpleworkflow 0004: audit and journal rows no longer lock their run.
--
-- A foreign key is checked for every inserted row by locking the referenced run
-- (FOR KEY SHARE), which writes to the run's heap page and the WAL. Every claim,
-- completion and journaled step inserts events, so these checks cost 10-20 % of the
-- hot statements. The rows are only ever written for a run the writer has just
-- inserted or holds the lease of; what the foreign keys still did, deleting these rows
-- with their run, is done by one statement-level trigger instead.
alter table {schema}workflow_event drop constraint workflow_event_workflow_id_fkey;
alter table {schema}workflow_step drop constraint workflow_step_run_id_fkey;

create function {schema}workflow_run_delete_children() returns trigger
language plpgsql as $$
begin
    delete from {schema_name}.workflow_event e using deleted_runs d where e.workflow_id = d.id;
    delete from {schema_name}.workflow_step s using deleted_runs d where s.run_id = d.id;
    return null;
end
$$;

create trigger workflow_run_delete_children
    after delete on {schema}workflow_run
    referencing old table as deleted_runs
    for each statement execute function {schema}workflow_run_delete_children();
