-- simpleworkflow 0008: the trace a run continues, as Postgres's 0011: the W3C trace
-- context of the request that started it, and under "attempt" that of the attempt that
-- last gave it back.
alter table workflow_run add column trace_context text check (trace_context is null or json_valid(trace_context));
