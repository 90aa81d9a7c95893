-- simpleworkflow 0011: the trace a run continues. A producer stores the W3C trace context
-- of the request that started the run ({"traceparent": ..., "tracestate": ...}), so that
-- a worker in another process continues that trace; a worker adds, under "attempt", the
-- context of the attempt that gave the run back (a retry, a suspension, a release), for
-- the next attempt to link to. Null when nobody traced the run; plain SQL inserts may
-- fill it too.
alter table {schema}workflow_run add column trace_context jsonb;
