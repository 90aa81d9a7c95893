"""Schemathesis against the server's own OpenAPI document, through a real server process
on each store: no request it generates gets a 5xx, and every response (errors included)
matches what the document declares (status, content type, schema). Bounded, so that it
runs in well under a minute: ``EXAMPLES`` requests per operation, derandomized."""

from __future__ import annotations

import pytest
import schemathesis
from api_helpers import served
from conftest import Store
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

#: Examples per operation (about 16 operations).
EXAMPLES = 30
#: No 5xx, every response as documented, and requests the document calls invalid refused.
#: Not "schema-valid requests accepted": the engine refuses text the document cannot
#: describe (a payload holding a NUL character), with a 4xx that says why.
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


def test_the_api_keeps_its_own_document(store: Store) -> None:
    with served(store, "--no-access-log") as base:
        schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 16
        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def conforms(case: schemathesis.Case) -> None:
                case.call_and_validate(checks=CHECKS)

            try:
                conforms()
            except Exception as exc:
                pytest.fail(f"{operation.label}: {exc}")
