-- simpleworkflow 0019: dashboard logouts shared by every process, as Postgres's 0024:
-- a logged-out session's nonce is kept until the session would have expired, and every
-- request of a logged-in session is checked against it by primary key.
create table workflow_dashboard_logout (
    nonce          text primary key,
    expires_at     text not null,
    logged_out_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);
create index idx_workflow_dashboard_logout_expires_at
    on workflow_dashboard_logout (expires_at);
