"""The names of the span attributes and events the tracing observer writes.

Where OpenTelemetry's semantic conventions name a thing, their name is used: the inbox is
a messaging system (``messaging.*``: a run is a message, its type the destination, a
worker the client). What they do not name is ours, under ``workflow.``; seed 001's
``run_id``, ``status``, ``step.name``, ``step.kind``, ``step.attempt`` and ``event`` are
among them, namespaced so that they cannot clash with another library's. docs/tracing.md
has the table.
"""

from __future__ import annotations

from typing import Final

# -- OpenTelemetry semantic conventions (messaging, errors) ----------------------------
MESSAGING_SYSTEM: Final = "messaging.system"
MESSAGING_OPERATION_TYPE: Final = "messaging.operation.type"
MESSAGING_OPERATION_NAME: Final = "messaging.operation.name"
MESSAGING_DESTINATION_NAME: Final = "messaging.destination.name"
MESSAGING_MESSAGE_ID: Final = "messaging.message.id"
MESSAGING_BATCH_MESSAGE_COUNT: Final = "messaging.batch.message_count"
MESSAGING_CLIENT_ID: Final = "messaging.client.id"
ERROR_TYPE: Final = "error.type"

#: ``messaging.system``.
SYSTEM: Final = "simpleworkflow"

# -- ours ------------------------------------------------------------------------------
#: The run's type (seed 001's ``workflow.name``), and its code version (``workflow.version``).
WORKFLOW_NAME: Final = "workflow.name"
WORKFLOW_VERSION: Final = "workflow.version"
#: The run (seed 001's ``run_id``), its parent, and whether a start stored it (False: its
#: idempotency key found a run that already existed).
RUN_ID: Final = "workflow.run.id"
RUN_PARENT_ID: Final = "workflow.run.parent_id"
RUN_CREATED: Final = "workflow.run.created"
#: The run's status after the attempt (seed 001's ``status``): ``succeeded``, ``failed``,
#: ``pending`` (due again: retried or suspended), ``cancelled``; unset when its lease was lost.
RUN_STATUS: Final = "workflow.run.status"
#: The attempt's number, from 1 (a suspension does not count one, as in ``Context.attempt``).
RUN_ATTEMPT: Final = "workflow.run.attempt"
#: Seconds from the run being due to its claim.
RUN_QUEUED_FOR: Final = "workflow.run.queued_for"
#: ``succeeded``, ``failed``, ``retried``, ``suspended``, ``cancelled``, ``lease_lost`` or
#: ``stopped`` (see ``simpleworkflow.observe``).
ATTEMPT_OUTCOME: Final = "workflow.attempt.outcome"
#: The step's name as journaled (``charge#2`` for the second ``charge``), its kind (``step``),
#: its attempt from 1 counted across the run's attempts, and its outcome: ``completed``,
#: ``retried`` (again after ``workflow.step.retry_in`` seconds) or ``failed``.
STEP_NAME: Final = "workflow.step.name"
STEP_KIND: Final = "workflow.step.kind"
STEP_ATTEMPT: Final = "workflow.step.attempt"
STEP_OUTCOME: Final = "workflow.step.outcome"
STEP_RETRY_IN: Final = "workflow.step.retry_in"
#: A signal's event name (seed 001's ``event``).
SIGNAL_EVENT: Final = "workflow.signal.event"
#: What a suspended run waits for (``sleep``, ``signal``, ``child``, ``retry``), until when
#: at the latest (ISO 8601), and the child waited for.
WAIT_KIND: Final = "workflow.wait.kind"
WAIT_UNTIL: Final = "workflow.wait.until"
WAIT_CHILD_ID: Final = "workflow.wait.child_id"
#: Why the worker stopped the handler: ``taken`` or ``not renewed``.
LEASE_LOST_REASON: Final = "workflow.lease_lost.reason"
#: A value the run published (``ctx.set_value``), and a stream it wrote: its key, how many
#: items one batch committed, and their first and last offsets.
VALUE_KEY: Final = "workflow.value.key"
STREAM_KEY: Final = "workflow.stream.key"
STREAM_ITEMS: Final = "workflow.stream.items"
STREAM_FIRST_OFFSET: Final = "workflow.stream.first_offset"
STREAM_LAST_OFFSET: Final = "workflow.stream.last_offset"
#: On a fork's span: the run it was forked from (its journal entry is ``workflow.step.name``).
RUN_FORKED_FROM: Final = "workflow.run.forked_from"
#: On a link: ``creation`` (the start's span) or ``previous_attempt``.
LINK_KIND: Final = "workflow.link.kind"

# -- span events -------------------------------------------------------------------------
#: On an attempt's span when the run suspends, one per wait, by what it waits for (with
#: ``workflow.step.name``, ``workflow.wait.until`` ...).
WAIT_EVENTS: Final = {
    "sleep": "workflow.sleep",
    "signal": "workflow.wait",
    "child": "workflow.wait_child",
    "retry": "workflow.step_retry_wait",
}
#: On the next attempt's span: the run resumed after waiting (``workflow.wait.kind``).
EVENT_RESUMED: Final = "workflow.resumed"
#: On an attempt's span: its lease was lost (``workflow.lease_lost.reason``).
EVENT_LEASE_LOST: Final = "workflow.lease_lost"
#: On an attempt's span: the run published a value (``workflow.value.key``,
#: ``workflow.step.name``), or closed a stream; on the span of the step whose function
#: appended them (else the attempt's), a batch of a stream's items committed.
EVENT_VALUE_SET: Final = "workflow.value_set"
EVENT_STREAM_APPENDED: Final = "workflow.stream_appended"
EVENT_STREAM_CLOSED: Final = "workflow.stream_closed"
