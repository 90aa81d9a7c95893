-- simpleworkflow 0010: debounce, as Postgres's 0013. While a run of its type with the key
-- is pending and unclaimed, later debounced starts with that key update it in place;
-- the unique index makes it one row per key.
alter table workflow_run add column debounce_key text;

create unique index idx_workflow_run_debounce
    on workflow_run (type, debounce_key)
    where status = 'pending' and deleted_at is null and debounce_key is not null;

-- A run leaves its debounce when it stops being pending (claimed, or cancelled), whoever
-- writes the row.
create trigger workflow_run_debounce_closed
after update of status on workflow_run
when old.debounce_key is not null and new.status <> 'pending'
begin
    update workflow_run set debounce_key = null where id = new.id;
end;
