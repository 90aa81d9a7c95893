-- simpleworkflow 0024: dashboard logouts shared by every process. A logout ended its
-- session only in the memory of the process that served it, so other processes serving
-- the same dashboard (replicas, several uvicorn workers) let its cookie in until its
-- lifetime ended, and a restart forgot every logout. Each logout now keeps the session's
-- nonce here until the session would have expired (expires_at); every request of a
-- logged-in session is checked against it by primary key. Rows past expires_at are
-- deleted at the next logout.
create table {schema}workflow_dashboard_logout (
    nonce          text primary key,
    expires_at     timestamptz not null,
    logged_out_at  timestamptz not null default now()
);
create index idx_workflow_dashboard_logout_expires_at
    on {schema}workflow_dashboard_logout (expires_at);
