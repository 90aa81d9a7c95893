-- simpleworkflow 0026: listings filtered by payload content (`payload_contains`, jsonb
-- `@>`) find their runs through this index instead of reading runs newest first until a
-- page is full, which beside a million runs read every one of them for a filter that
-- matches few. `jsonb_path_ops` serves `@>` alone, which is all the listing asks, with an
-- index about 60 % the size of the default operator class's. Creating it reads the whole
-- table and blocks writes to it meanwhile (about 3 s per million runs on a small
-- machine); on a large table create it first with `create index concurrently` under the
-- same name, and this migration leaves it be. It costs writes: a run's insert, claim and
-- completion (none a HOT update) each add the payload's entries to it (docs/performance.md,
-- "What the index costs each run").
create index if not exists idx_workflow_run_payload
    on {schema}workflow_run using gin (payload jsonb_path_ops);
