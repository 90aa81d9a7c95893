-- The schema after every migration, in one file. A test checks that migrating an empty
-- database from 0001 gives exactly this.

create table workflow_run (
    id              text primary key default (
                        lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' ||
                        substr(lower(hex(randomblob(2))), 2) || '-' ||
                        substr('89ab', 1 + (abs(random()) % 4), 1) ||
                        substr(lower(hex(randomblob(2))), 2) || '-' || lower(hex(randomblob(6)))),
    type            text not null,
    payload         text not null default '{}' check (json_valid(payload)),
    status          text not null default 'pending'
                    check (status in ('pending', 'leased', 'succeeded', 'failed', 'cancelled')),
    priority        integer not null default 100,
    run_at          text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    idempotency_key text,
    attempt         integer not null default 0,
    max_attempts    integer not null default 3 check (max_attempts >= 1),
    leased_by       text,
    lease_until     text,
    last_error      text,
    result          text check (result is null or json_valid(result)),
    created_at      text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at      text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    deleted_at      text,
    lease_token     text
);

create index idx_workflow_run_claim
    on workflow_run (priority, run_at)
    where status = 'pending' and deleted_at is null;

-- SQLite uses an index for LIKE 'prefix%' when case_sensitive_like is on (the backend sets it).
create index idx_workflow_run_type_prefix on workflow_run (type);

create unique index idx_workflow_run_idempotency on workflow_run (idempotency_key);

create index idx_workflow_run_deleted_at
    on workflow_run (deleted_at)
    where deleted_at is not null;

create index idx_workflow_run_created on workflow_run (created_at desc, id desc);

create table workflow_event (
    id          integer primary key autoincrement,
    workflow_id text not null references workflow_run (id) on delete cascade,
    event_type  text not null,
    data        text not null default '{}' check (json_valid(data)),
    created_at  text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

create index idx_workflow_event_workflow on workflow_event (workflow_id, id);

create table workflow_registry (
    workflow_name text primary key,
    intent_type   text not null default 'workflow',
    runtime       text not null,
    is_enabled    integer not null default 1,
    description   text,
    created_at    text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    updated_at    text not null default (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

create index idx_workflow_run_lease_expiry
    on workflow_run (lease_until)
    where status = 'leased';
