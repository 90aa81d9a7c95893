-- simpleworkflow 0005: runs inserted with plain SQL get time-ordered ids too.
--
-- A UUID version 7 (RFC 9562): the first 48 bits are the Unix time in milliseconds, the
-- rest random (taken from gen_random_uuid, whose version bits 0100 become 0111). New
-- runs then land at the end of the primary key, and their audit events next to each
-- other in (workflow_id, id), instead of on a random page of each index. The clients
-- send ids of the same kind themselves.
create function {schema}workflow_uuid_v7() returns uuid
language sql volatile parallel safe as $$
    select encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    placing substring(int8send((extract(epoch from clock_timestamp()) * 1000)::bigint)
                                      from 3)
                    from 1 for 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

alter table {schema}workflow_run alter column id set default {schema}workflow_uuid_v7();
